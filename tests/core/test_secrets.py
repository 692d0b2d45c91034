"""Tokens from the environment never reach events, status or logs written by the trainer."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from trainers.core.events import Error, EventWriter
from trainers.core.rundir import update_status

TOKEN = "hf_SECRETsecret123456"
REPO = Path(__file__).resolve().parents[2]


def test_events_and_status_are_redacted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    EventWriter(tmp_path).emit(Error(message=f"401 for token {TOKEN}", suggestions=[f"x {TOKEN}"]))
    update_status(tmp_path, message=f"auth {TOKEN}")
    text = (tmp_path / "events.jsonl").read_text() + (tmp_path / "status.json").read_text()
    assert TOKEN not in text and "***" in text


@pytest.mark.slow
def test_trainer_output_is_redacted(tmp_path: Path) -> None:
    env = {"HF_TOKEN": TOKEN, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"}
    result = subprocess.run([sys.executable, "-m", "trainers", "lora", "--run-dir", str(tmp_path / "run"),
                             "--set", f"pretrained_model_name_or_path='{tmp_path}/{TOKEN}'", "--set",
                             "max_train_steps=1"], env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 2
    everything = result.stdout + result.stderr + (tmp_path / "run" / "events.jsonl").read_text()
    assert TOKEN not in everything and "***" in everything
    assert TOKEN not in json.dumps(json.loads((tmp_path / "run" / "status.json").read_text()))
    assert TOKEN not in (tmp_path / "run" / "config.toml").read_text()


def test_only_names_of_secrets_count_as_secrets() -> None:
    from trainers.core.secrets import SECRET_KEY

    for name in ("hf_token", "huggingface_token", "wandb_api_key", "token", "ATELIER_PASSWORD", "aws_secret_access_key"):
        assert SECRET_KEY.search(name), name
    for name in ("max_token_length", "t5xxl_max_token_length", "text_encoder_max_tokens", "token_warmup_min",
                 "token_warmup_step", "keep_tokens", "secondary_separator", "huggingface_repo_id"):
        assert not SECRET_KEY.search(name), name
