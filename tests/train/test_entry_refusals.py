"""A config that Validate refuses is refused by the trainer's entry (`python -m trainers <method>`, and the launcher
the GUI starts it with) before torch, diffusers, transformers, peft or accelerate load, by the checks the page's
Validate runs (trainers/preflight/), and the refusal reaches the run directory as any other."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from trainers.core.options import config_from_dict, load_config
from trainers.preflight.report import preflight

REPO = Path(__file__).resolve().parents[2]
HEAVY = ("torch", "diffusers", "transformers", "peft", "accelerate", "safetensors", "bitsandbytes")


def _refused_config(tmp_path: Path) -> Path:
    """A LoRA config naming a folder that holds no model and a dataset folder that does not exist."""
    not_a_model = tmp_path / "not-a-model"
    not_a_model.mkdir()
    config = tmp_path / "config.toml"
    config_from_dict("lora", {"pretrained_model_name_or_path": str(not_a_model), "max_train_steps": 1,
                              "train_data_dir": str(tmp_path / "no-such-data"),
                              "output_dir": str(tmp_path / "out")}).save(config)
    return config


def test_a_refused_config_ends_the_run_before_the_heavy_imports(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    from trainers.__main__ import main

    monkeypatch.setattr("trainers.train.run._train", lambda *a, **k: pytest.fail("the run went on to its imports"))
    config, run_dir = _refused_config(tmp_path), tmp_path / "run"
    assert main(["lora", "--config", str(config), "--run-dir", str(run_dir)]) == 2
    page = preflight(load_config("lora", config, [], []))  # what the page's Validate says
    assert {issue.field for issue in page.errors} >= {"pretrained_model_name_or_path", "train_data_dir"}
    status = json.loads((run_dir / "status.json").read_text(encoding="utf-8"))
    assert status["state"] == "failed" and status["exit_code"] == 2
    assert all(str(issue) in status["message"] for issue in page.errors), (status["message"], page.errors)
    error = [json.loads(line) for line in (run_dir / "events.jsonl").read_text(encoding="utf-8").splitlines()][-1]
    assert error["type"] == "error" and error["kind"] == "ConfigError" and error["message"] == status["message"]
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_the_entry_and_the_launcher_refuse_it_in_a_fresh_interpreter_without_torch(tmp_path: Path) -> None:
    config = _refused_config(tmp_path)
    code = f"""
import json, sys
from trainers.__main__ import main
from trainers.core.launch import accelerate_command
from trainers.core.options import load_config
from trainers.train.launcher import main as launch

config = {str(config)!r}
cfg = load_config("lora", config, [], [])
codes = [main(["lora", "--config", config, "--run-dir", {str(tmp_path / "run")!r}]),
         launch(accelerate_command(cfg, config, {str(tmp_path / "launched")!r})[3:])]
print(json.dumps([codes, sorted(m for m in sys.modules if m.split(".")[0] in {HEAVY!r})]))
"""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(REPO), "HF_HOME": str(tmp_path / "hf")}
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    codes, heavy = json.loads(done.stdout.strip().splitlines()[-1])
    assert codes == [2, 2] and heavy == [], (codes, heavy)
    for run in ("run", "launched"):
        status = json.loads((tmp_path / run / "status.json").read_text(encoding="utf-8"))
        assert status["state"] == "failed" and "train_data_dir" in status["message"]
    assert "Traceback" not in done.stderr


# Refusals whose message is what is tested, run in this process (the process wiring is tested above and by
# test_lora_training's unknown option, test_launcher's refusals and test_optimizers' class-path optimizer).


def test_a_run_without_a_length_names_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from helpers import train

    assert train("lora", tmp_path / "run", output_dir=str(tmp_path)) == 2
    assert "set max_train_epochs or max_train_steps" in capsys.readouterr().err


def test_a_bad_sample_prompt_is_a_clear_error_before_training(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    from helpers import train

    assert train("lora", tmp_path / "run", max_train_steps=1, sample_prompt_lines=["a cat --w 500"],
                 sample_every_n_steps=1) == 2
    assert "sample_prompt_lines: line 1: --w '500' must be a multiple of 8" in capsys.readouterr().err


def test_a_flat_image_folder_fails_before_the_model_loads(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from PIL import Image

    from helpers import events, train

    data = tmp_path / "flat"
    data.mkdir()
    Image.new("RGB", (8, 8)).save(data / "a.png")
    assert train("lora", tmp_path / "run", pretrained_model_name_or_path="some-org/some-model",
                 train_data_dir=str(data), output_dir=str(tmp_path / "o"), max_train_steps=1) == 2
    err = capsys.readouterr().err
    assert "<repeats>_<tokens>" in err and "Expected" in err
    error = events(tmp_path / "run")[-1]
    assert error["type"] == "error" and "train_data_dir" in error["message"]
    assert json.loads((tmp_path / "run" / "status.json").read_text())["state"] == "failed"
