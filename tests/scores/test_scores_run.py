"""A run with score_saves on scores each sampling after it renders: scores.json, a Scores event per sampling, the
scores in the saves' metadata; `python -m trainers scores <run>` scores the finished run again the same way."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from safetensors import safe_open

from trainers.demo import build_dataset

from helpers import REPO, events, run_trainer, sets

FAST = {"resolution": "64", "train_batch_size": 2, "max_data_loader_n_workers": 0, "learning_rate": 1e-3}


@pytest.mark.slow  # runs a trainer process
def test_a_scored_run_writes_scores_the_event_and_the_metadata(tiny_sd1_dir: Path, tiny_clip_dir: Path,
                                                               tiny_dino_dir: Path, tmp_path: Path) -> None:
    data = build_dataset(tmp_path / "data", folder="1_sks shape", size=64)
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("sks shape --s 2 --d 1\nred circle --s 2\n", encoding="utf-8")
    run, out = tmp_path / "run", tmp_path / "out"
    result = run_trainer(sets(pretrained_model_name_or_path=str(tiny_sd1_dir), train_data_dir=str(data),
                              output_dir=str(out), output_name="s", **FAST, network_dim=4, network_alpha=2,
                              max_train_steps=2, save_every_n_steps=1, sample_every_n_steps=1,
                              sample_prompts=str(prompts), score_saves=True, score_model=str(tiny_clip_dir),
                              likeness_model=str(tiny_dino_dir)), run)
    assert result.returncode == 0, result.stderr[-3000:]
    found = events(run)
    scores = [e for e in found if e["type"] == "scores"]
    assert [e["step"] for e in scores] == [1, 2, 2], "the last sampling again at the end, with its final save"
    assert scores[1].get("save") is None and Path(scores[2]["save"]).name == "s.safetensors"
    assert scores[-1].get("best_save") is not None
    assert not [e for e in found if e["type"] == "warning" and "score" in e["message"]]
    report = json.loads((run / "scores.json").read_text(encoding="utf-8"))
    assert [r["step"] for r in report["records"]] == [1, 2]
    assert Path(report["records"][0]["save"]).name == "s-step00000001.safetensors"
    assert Path(report["records"][1]["save"]).name == "s.safetensors", "the final save of the last step"
    assert all(-1 <= r["fidelity"] <= 1 and -1 <= r["likeness"] <= 1 for r in report["records"])
    with safe_open(str(out / "s.safetensors"), framework="pt") as handle:
        metadata = handle.metadata()
    assert metadata["atelier_best_save"] == Path(report["best"]["save"]).name
    assert float(metadata["atelier_score_likeness"]) == pytest.approx(report["records"][1]["likeness"], abs=1e-5)
    assert "ss_network_dim" in metadata
    again = subprocess.run([sys.executable, "-m", "trainers", "scores", str(run), "--device", "cpu"], cwd=REPO,
                           capture_output=True, text=True, timeout=600, env={"HF_HUB_OFFLINE": "1",
                                                                             "PATH": "/usr/bin:/bin"})
    assert again.returncode == 0, again.stderr[-3000:]
    rescored = json.loads((run / "scores.json").read_text(encoding="utf-8"))
    assert [round(r["likeness"], 5) for r in rescored["records"]] == [round(r["likeness"], 5)
                                                                      for r in report["records"]]
    assert "best save (likeness_keep_fidelity): " in again.stdout
