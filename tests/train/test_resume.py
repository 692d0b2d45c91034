"""Resume: 10 steps straight equal 5 + resume + 5; Stop saves a state that 'latest' continues; a state
that does not fit the config is a clear error; the GUI's Resume button (without a browser).

Trainers run in this process (trainers.__main__.run_method), on the tests' fake model family (tests/fake_family/),
to stay fast.
"""
from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest
import torch

from trainers.core.rundir import read_status
from trainers.demo import build_dataset

from helpers import events, train

pytestmark = pytest.mark.slow

FAST = {"resolution": "64", "train_batch_size": 2, "max_data_loader_n_workers": 0, "learning_rate": 1e-3,
        "network_dim": 4, "network_alpha": 2}


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_dataset(tmp_path_factory.mktemp("resume data"), folder="2_sks shape")  # 16 samples: 8 steps an epoch


@pytest.fixture()
def lora(fake_model_dir: Path, dataset: Path, tmp_path: Path) -> dict[str, object]:
    return {"pretrained_model_name_or_path": str(fake_model_dir), "train_data_dir": str(dataset),
            "output_dir": str(tmp_path / "out"), **FAST}


def lora_file(path: Path) -> dict[str, torch.Tensor]:
    from trainers.methods.lora.file_format import read_lora_file

    return read_lora_file(path)[0]


def assert_same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor], atol: float = 1e-6) -> None:
    assert a.keys() == b.keys()
    worst = max((a[k].float() - b[k].float()).abs().max().item() for k in a)
    assert worst <= atol, f"largest difference {worst}"


def test_lora_ten_steps_equal_five_plus_resume_plus_five(lora: dict, tmp_path: Path) -> None:
    common = {**lora, "max_train_steps": 10, "lr_scheduler": "cosine", "lr_warmup_steps": 3, "save_precision": "float"}
    assert train("lora", tmp_path / "straight", **common, output_name="straight", save_every_n_steps=5,
                 save_state=True) == 0
    out = tmp_path / "out"
    state = out / "straight-step00000005-state"
    manifest = json.loads((state / "manifest.json").read_text())
    assert (manifest["step"], manifest["epoch"], manifest["batches"], manifest["kind"]) == (5, 1, 5, "step")
    assert {"weights.safetensors", "optimizer.pt", "scheduler.pt", "rng.pt"} <= set(manifest["files"])
    assert (out / "straight-state").is_dir(), "save_state also saves the state at the end"

    # step 5 is inside epoch 1 (8 steps an epoch): the resumed run skips 5 batches, then crosses into epoch 2
    assert train("lora", tmp_path / "resumed", **common, output_name="resumed", resume=str(state)) == 0
    assert_same(lora_file(out / "straight.safetensors"), lora_file(out / "resumed.safetensors"), atol=0)
    evs = events(tmp_path / "resumed")
    resumed = next(e for e in evs if e["type"] == "resume")
    assert resumed["step"] == 5 and resumed["path"] == str(state)
    progress = [e for e in evs if e["type"] == "progress"]
    assert [e["step"] for e in progress] == [6, 7, 8, 9, 10] and [e["epoch"] for e in progress] == [1, 1, 1, 2, 2]
    straight = {e["step"]: e for e in events(tmp_path / "straight") if e["type"] == "progress"}
    for e in progress:  # the same batches, noise and learning rate at every step
        assert e["lr"] == pytest.approx(straight[e["step"]]["lr"]) and e["loss"] == straight[e["step"]]["loss"]


def test_resumed_without_cached_latents_the_memos_train_the_same_floats(fake_model_dir: Path, tmp_path: Path) -> None:
    """The VAE and text-encoder memos (no cache_latents; the text encoder frozen) keep rows of batches a resumed
    run, its memos empty, never saw: 3 epochs of 2 batches of 4, resumed in epoch 2, train the same floats (the fake
    encoders' rows depend on their batch, as real ones' do: test_fake_family.py)."""
    data = build_dataset(tmp_path / "data", folder="1_sks shape", size=64)  # 8 images of one bucket
    common = {**FAST, "pretrained_model_name_or_path": str(fake_model_dir), "train_data_dir": str(data),
              "output_dir": str(tmp_path / "out"), "train_batch_size": 4, "max_train_steps": 6,
              "network_train_unet_only": True, "save_precision": "float"}
    assert train("lora", tmp_path / "straight", **common, output_name="straight", save_every_n_steps=3,
                 save_state=True) == 0
    state = tmp_path / "out" / "straight-step00000003-state"
    assert train("lora", tmp_path / "resumed", **common, output_name="resumed", resume=str(state)) == 0
    straight, resumed = (lora_file(tmp_path / "out" / f"{name}.safetensors") for name in ("straight", "resumed"))
    assert_same(straight, resumed, atol=0)

    def losses(run: str) -> dict[int, float]:
        return {e["step"]: e["loss"] for e in events(tmp_path / run) if e["type"] == "progress" and e["step"] > 3}

    assert losses("resumed") == losses("straight") and len(losses("resumed")) == 3


def test_stop_saves_a_state_that_latest_continues(lora: dict, tmp_path: Path) -> None:
    run = tmp_path / "run"
    (run / "control").mkdir(parents=True)
    (run / "control" / "stop").touch()  # Stop pressed before the first step ended
    assert train("lora", run, **lora, max_train_steps=3) == 0
    status = json.loads((run / "status.json").read_text())
    state = tmp_path / "out" / "lora-step00000001-state"
    assert status["state"] == "stopped" and "training state" in status["message"] and state.is_dir()
    assert status["stop_acknowledged"] > 0
    saved = [e for e in events(run) if e["type"] == "checkpoint"]
    assert saved[-1]["kind"] == "stop" and saved[-1]["state"] == str(state)
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler, "the trainer gave the signal back"

    assert train("lora", tmp_path / "again", **lora, max_train_steps=3, resume="latest") == 0
    evs = events(tmp_path / "again")
    assert [e["step"] for e in evs if e["type"] == "progress"] == [2, 3]
    assert evs[-1]["type"] == "done" and (tmp_path / "out" / "lora.safetensors").exists()


def test_a_state_that_does_not_fit_is_a_config_error(lora: dict, tmp_path: Path) -> None:
    run = tmp_path / "run"
    (run / "control").mkdir(parents=True)
    (run / "control" / "stop").touch()
    assert train("lora", run, **lora, max_train_steps=2) == 0
    code = train("lora", tmp_path / "wider", **{**lora, "network_dim": 8}, max_train_steps=2, resume="latest")
    error = events(tmp_path / "wider")[-1]
    assert code == 2 and error["type"] == "error" and error["message"].startswith("- resume: ")
    assert "network_dim" in error["message"] and "[4, " in error["message"] and "[8, " in error["message"]
    assert "trace" not in error


def _saved_weights(out: Path, name: str) -> dict[str, torch.Tensor]:
    """Every tensor of a full model's save: its single file, and its folder's files (path/name)."""
    from safetensors.torch import load_file

    tensors = dict(load_file(out / f"{name}.safetensors"))
    for file in sorted((out / name).rglob("*.safetensors")):
        part = file.relative_to(out / name).as_posix()
        tensors |= {f"{part}/{k}": v for k, v in load_file(file).items()}
    return tensors


def test_finetune_with_ema_resumes_to_the_same_weights(fake_model_dir: Path, dataset: Path, tmp_path: Path) -> None:
    # Saved as both: the fake family's single file holds its text encoder's trained weights, its folder the EMA's.
    common = {"pretrained_model_name_or_path": str(fake_model_dir), "train_data_dir": str(dataset),
              "output_dir": str(tmp_path / "out"), **{k: v for k, v in FAST.items() if not k.startswith("network")},
              "max_train_steps": 4, "save_model_as": "both", "save_precision": "float", "use_ema": "cpu",
              "ema_decay": 0.5, "save_ema": "both", "train_text_encoder": True}
    assert train("finetune", tmp_path / "a", **common, output_name="straight", save_every_n_steps=2,
                 save_state=True) == 0
    state = tmp_path / "out" / "straight-step00000002-state"
    assert (state / "extra.safetensors").is_file(), "the EMA is part of the state"
    assert train("finetune", tmp_path / "b", **common, output_name="resumed", resume=str(state)) == 0
    for suffix in ("", "-ema"):
        a = _saved_weights(tmp_path / "out", f"straight{suffix}")
        b = _saved_weights(tmp_path / "out", f"resumed{suffix}")
        assert any(k.startswith("text_encoder/") for k in a), "the folder's text encoder is compared too"
        assert_same(a, b, atol=1e-5)


def test_gui_resume_starts_from_the_newest_state_of_a_stopped_run(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    from gui.jobs import JobError, JobManager, resume_config
    from trainers.core.options import load_config

    from helpers import write_state

    out, run = tmp_path / "out", tmp_path / "runs" / "r1"
    run.mkdir(parents=True)
    load_config("lora", overrides=[f"output_dir={json.dumps(str(out))}", "output_name='x'", "max_train_steps=9",
                                   "pretrained_model_name_or_path='org/model'"]).save(run / "config.toml")
    (run / "status.json").write_text(json.dumps({"state": "stopped", "method": "lora"}))
    with pytest.raises(JobError, match="left no training state of 'x'"):
        resume_config(run)
    write_state(out / "x-step00000002-state", 2)
    write_state(out / "x-step00000004-state", 4)
    assert resume_config(run).resume == str(out / "x-step00000004-state")

    started = []
    def start(self: JobManager, cfg: object) -> Path:  # what start does to the runs directory, without a trainer
        started.append(cfg)
        (tmp_path / "runs" / "r2").mkdir()
        return tmp_path / "runs" / "r2"

    monkeypatch.setattr(JobManager, "start", start)
    assert JobManager(tmp_path / "runs").resume(run) == tmp_path / "runs" / "r2"
    assert read_status(tmp_path / "runs" / "r2")["resumed_from"] == "r1"  # the Runs table's note
    assert started[0].resume == str(out / "x-step00000004-state") and started[0].max_train_steps == 9
    (run / "status.json").write_text(json.dumps({"state": "finished", "method": "lora"}))
    with pytest.raises(JobError, match="finished"):
        resume_config(run)


def test_a_run_that_dies_unsaved_resumes_from_its_rolling_state(lora: dict, tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    import trainers.methods.lora.objectives as loop  # the LoRA's objective: its images' denoising loss

    real, calls = loop.diffusion_loss, [0]

    def dies_at_third_batch(*args, **kwargs) -> torch.Tensor:
        calls[0] += 1
        if calls[0] == 3:
            raise KeyboardInterrupt  # like a kill: no step end, no emergency save
        return real(*args, **kwargs)

    monkeypatch.setattr(loop, "diffusion_loss", dies_at_third_batch)
    every_step = {**lora, "max_train_steps": 4, "save_state_every_n_minutes": 1e-6}
    assert train("lora", tmp_path / "run", **every_step) == 130
    rolling = [e for e in events(tmp_path / "run") if e["type"] == "checkpoint"]
    assert [(e["kind"], e["step"]) for e in rolling] == [("rolling", 1), ("rolling", 2)]
    out = tmp_path / "out"
    assert sorted(p.name for p in out.iterdir()) == ["lora-step00000002-state"], "a rolling state replaces the last"

    monkeypatch.setattr(loop, "diffusion_loss", real)
    assert train("lora", tmp_path / "again", **every_step, resume="latest") == 0
    assert [e["step"] for e in events(tmp_path / "again") if e["type"] == "progress"] == [3, 4]
    assert sorted(p.name for p in out.iterdir()) == ["lora.safetensors"], "rolling states go when the run is done"
