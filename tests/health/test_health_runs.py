"""Every save of a run is checked on the main process: its report lands in the run's health/ folder and a Health
event in its events; a check that fails is a warning with its reason and the run still finishes."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from trainers.demo import build_dataset

from helpers import events, run_trainer, sets

FAST = {"resolution": "64", "train_batch_size": 2, "max_data_loader_n_workers": 0, "learning_rate": 1e-3}


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_dataset(tmp_path_factory.mktemp("health data"), folder="1_sks shape", size=64)


def _train(method: str, run_dir: Path, health: Any, **values: object) -> int:
    """A trainer in this process with the health check `health` handed in (as trainers/__main__.py hands its own)."""
    from trainers.methods import method_memory_tips
    from trainers.preflight.validate import check, method_outputs
    from trainers.train.run import Checks, run_method

    overrides = [f"{k}={json.dumps(v)}" for k, v in values.items()]
    return run_method(method, None, run_dir, overrides, Checks(check, method_outputs, method_memory_tips, health))


@pytest.mark.slow  # runs a trainer process
def test_a_lora_run_writes_a_health_report_for_every_save_with_its_effect(tiny_sd1_dir: Path, dataset: Path,
                                                                          tmp_path: Path) -> None:
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("sks shape --s 2 --d 1\nred circle --s 2\n", encoding="utf-8")
    run, out = tmp_path / "run", tmp_path / "out"
    result = run_trainer(sets(pretrained_model_name_or_path=str(tiny_sd1_dir), train_data_dir=str(dataset),
                              output_dir=str(out), output_name="h", **FAST, network_dim=4, network_alpha=2,
                              max_train_steps=2, save_every_n_steps=1, sample_every_n_steps=2,
                              sample_at_first=True, sample_prompts=str(prompts)), run)
    assert result.returncode == 0, result.stderr[-3000:]
    found = events(run)
    health = [e for e in found if e["type"] == "health"]
    assert [Path(e["path"]).name for e in health] == ["h-step00000001.safetensors", "h.safetensors"]
    assert found[-1]["type"] == "done"
    for event in health:
        report = json.loads(Path(event["report"]).read_text(encoding="utf-8"))
        assert Path(event["report"]) == run / "health" / f"{Path(event['path']).name}.json"
        assert report["verdict"] == event["verdict"] and report["warnings"] == event["warnings"]
        assert report["checks"]["weights"]["modules"] > 0 and report["checks"]["weights"]["nonfinite_count"] == 0
        assert report["checks"]["loading"]["loaders"]["ComfyUI"]["dropped"] == 0
        effect = report["checks"]["effect"]
        assert effect["difference"] >= 0 and Path(effect["base"]).parent == run / "health"
        assert Image.open(effect["with_lora"]).size == Image.open(effect["base"]).size == (64, 64)
    bases = {json.loads(Path(e["report"]).read_text())["checks"]["effect"]["base"] for e in health}
    assert len(bases) == 1, "the base image is rendered once per run"
    first = next(e for e in found if e["type"] == "sample" and e["step"] == 0 and e["index"] == 0)
    assert Image.open(bases.pop()).tobytes() == Image.open(first["path"]).tobytes(), (
        "the base image is the base model's: the LoRA at multiplier 0 renders what its untrained start did")
    final = json.loads(Path(health[-1]["report"]).read_text())["checks"]["effect"]["with_lora"]
    last = next(e for e in found if e["type"] == "sample" and e["step"] == 2 and e["index"] == 0)
    assert Image.open(final).tobytes() == Image.open(last["path"]).tobytes(), "the final save's image is its sample"


@pytest.mark.slow  # runs a trainer (in this process)
def test_a_failing_check_is_a_warning_and_the_run_finishes(fake_model_dir: Path, dataset: Path, tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    from trainers.health.report import check_and_write

    def failing(*args: Any) -> dict[str, Any]:
        raise RuntimeError("planted failure")

    monkeypatch.setattr("trainers.health.check.check_save", failing)
    run = tmp_path / "run"
    assert _train("lora", run, check_and_write, pretrained_model_name_or_path=str(fake_model_dir),
                  train_data_dir=str(dataset), output_dir=str(tmp_path / "out"), output_name="f", **FAST,
                  network_dim=4, network_alpha=2, max_train_steps=1) == 0
    found = events(run)
    reason = "the health check of f.safetensors failed: RuntimeError: planted failure"
    assert any(e["type"] == "warning" and e["message"] == reason for e in found)
    health = [e for e in found if e["type"] == "health"]
    assert len(health) == 1 and health[0]["verdict"] == "warnings" and health[0]["warnings"] == [reason]
    assert found[-1]["type"] == "done"


@pytest.mark.slow  # runs a trainer (in this process)
def test_a_finetune_without_samples_is_scanned_and_says_the_effect_was_not_checked(fake_model_dir: Path,
                                                                                     dataset: Path,
                                                                                     tmp_path: Path) -> None:
    from trainers.health.report import check_and_write

    run = tmp_path / "run"
    assert _train("finetune", run, check_and_write, pretrained_model_name_or_path=str(fake_model_dir),
                  train_data_dir=str(dataset), output_dir=str(tmp_path / "out"), output_name="t", **FAST,
                  max_train_steps=1, save_model_as="safetensors") == 0
    health = [e for e in events(run) if e["type"] == "health"]
    assert len(health) == 1 and health[0]["verdict"] == "healthy", health
    report = json.loads((run / "health" / "t.safetensors.json").read_text(encoding="utf-8"))
    assert report["checks"]["weights"]["nonfinite_count"] == 0
    assert report["checks"]["effect"] == {"checked": False, "reason": "the run renders no samples (sample_prompts "
                                                                      "is empty): the effect was not checked"}


@pytest.mark.slow  # runs a trainer (in this process)
def test_a_lycoris_save_has_its_effect_checked_and_an_embeddings_epoch_saves_are_scanned(tiny_sd1_dir: Path,
                                                                                           dataset: Path,
                                                                                           tmp_path: Path) -> None:
    from trainers.health.report import check_and_write

    common = {"pretrained_model_name_or_path": str(tiny_sd1_dir), "train_data_dir": str(dataset), **FAST,
              "sample_prompt_lines": ["sks shape --s 2 --d 1"], "sample_every_n_steps": 100}  # a run that samples
    run = tmp_path / "loha"
    assert _train("lora", run, check_and_write, output_dir=str(tmp_path / "o1"), output_name="l", **common,
                  network_module="lycoris.kohya", network_args=["algo=loha"], network_dim=4, network_alpha=2,
                  max_train_steps=1) == 0
    report = json.loads((run / "health" / "l.safetensors.json").read_text(encoding="utf-8"))
    assert report["checks"]["weights"]["modules"] > 0 and report["checks"]["weights"]["nonfinite_count"] == 0
    assert "difference" in report["checks"]["effect"], report["checks"]["effect"]
    assert report["checks"]["loading"]["loaders"]["ComfyUI"]["dropped"] == 0

    run = tmp_path / "ti"
    assert _train("textual_inversion", run, check_and_write, output_dir=str(tmp_path / "o2"), output_name="t",
                  **common, token_string="sks", max_train_epochs=2, save_every_n_epochs=1) == 0
    health = [e for e in events(run) if e["type"] == "health"]
    assert [Path(e["path"]).name for e in health] == ["t-000001.safetensors", "t.safetensors"]
    for event in health:
        report = json.loads(Path(event["report"]).read_text(encoding="utf-8"))
        assert event["verdict"] == "healthy" and report["checks"]["weights"]["nonfinite_count"] == 0
        assert report["checks"]["effect"]["checked"] is False
        assert "cannot be switched off" in report["checks"]["effect"]["reason"]


@pytest.mark.slow  # runs two trainer processes
def test_two_processes_check_every_save_once(fake_model_dir: Path, dataset: Path, tmp_path: Path) -> None:
    from helpers import fake_family_env, two_processes

    run = tmp_path / "run"
    result = run_trainer(sets(pretrained_model_name_or_path=str(fake_model_dir), train_data_dir=str(dataset),
                              output_dir=str(tmp_path / "out"), output_name="d", **FAST, network_dim=4,
                              network_alpha=2, keep_global_batch=True, num_processes=2, max_train_steps=2,
                              save_every_n_steps=1, sample_prompt_lines=["sks shape --s 2 --d 1", "red circle --s 2"],
                              sample_every_n_steps=100),
                         run, two_processes(), env=fake_family_env(ACCELERATE_USE_CPU="1"))
    assert result.returncode == 0, result.stderr[-3000:]
    health = [e for e in events(run) if e["type"] == "health"]
    assert [Path(e["path"]).name for e in health] == ["d-step00000001.safetensors", "d.safetensors"]
    for event in health:
        effect = json.loads(Path(event["report"]).read_text(encoding="utf-8"))["checks"]["effect"]
        assert "difference" in effect, effect  # rendered by the main process while the other waited


@pytest.mark.slow  # runs a trainer (in this process)
def test_a_controlnet_save_is_scanned(tiny_sd1_dir: Path, tmp_path: Path) -> None:
    from trainers.health.report import check_and_write

    from methods.test_controlnet import tiny_data

    run = tmp_path / "run"
    assert _train("controlnet", run, check_and_write, pretrained_model_name_or_path=str(tiny_sd1_dir),
                  output_dir=str(tmp_path / "out"), max_train_steps=1, train_batch_size=1, learning_rate=1e-3,
                  **tiny_data(tmp_path)) == 0
    health = [e for e in events(run) if e["type"] == "health"]
    assert [Path(e["path"]).name for e in health] == ["controlnet"] and health[0]["verdict"] == "healthy", health
    report = json.loads(Path(health[0]["report"]).read_text(encoding="utf-8"))
    assert report["checks"]["weights"]["files"] >= 1 and report["checks"]["weights"]["nonfinite_count"] == 0
