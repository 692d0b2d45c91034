"""FSDP2 and DeepSpeed ZeRO-2 for real: 2 CPU processes over gloo, launched with the run's accelerate.yaml.

Against one plain one-process finetune: an FSDP2 run on 2 processes x batch 1 that saves a sharded training state
(each process its shards) at step 2 and is killed at step 3 (a rank fails), then resumed, must end on its weights and
write a diffusers folder that loads; so must one process resuming those shards, a ZeRO-2 run killed and resumed the
same way, an FSDP2 run resumed from the one-process (DDP) run's step-2 state, and one process resuming that run's
gathered (FULL_STATE_DICT) step-3 state. An FSDP2 LoRA saves the one-process LoRA file and reports the one-process
validation loss. All on the tests' fake model family (tests/fake_family/): what they check does not depend on the
model.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from trainers.core.options import config_from_dict
from trainers.demo import build_dataset

from helpers import events, fake_family_env, free_port, run_trainer, sets, train

pytestmark = pytest.mark.slow

# AdamW with eps = 1 moves each weight in proportion to its gradient, so the comparison sees the gradients.
VALUES = {"resolution": "64", "max_data_loader_n_workers": 0, "learning_rate": 1.0, "optimizer_args": ["eps=1.0"],
          "save_precision": "float", "keep_global_batch": True, "train_batch_size": 2, "max_train_steps": 4}


def sharded_launcher(tmp_path: Path, backend: str = "fsdp") -> list[str]:
    """`accelerate launch` with the accelerate.yaml Atelier writes for `backend` ('fsdp': FSDP2; 'deepspeed': ZeRO-2)."""
    from trainers.core.launch import write_accelerate_config

    cfg = config_from_dict("finetune", {"num_processes": 2, "distributed_backend": backend, "max_train_steps": 1})
    path = write_accelerate_config(cfg, tmp_path)
    return [sys.executable, "-m", "accelerate.commands.launch", "--config_file", str(path),
            "--main_process_port", str(free_port())]


def manifest(state: Path) -> dict:
    return json.loads((state / "manifest.json").read_text(encoding="utf-8"))


def unet_weights(folder: Path) -> dict:
    from safetensors.torch import load_file

    return load_file(folder / "denoiser" / "diffusion_pytorch_model.safetensors")  # the fake family's denoiser_folder


@pytest.fixture(scope="module")
def one_process(module_fake_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, Path]:
    """(options, output folder) of a plain one-process finetune: what the sharded runs must reproduce."""
    work = tmp_path_factory.mktemp("one process")
    data = build_dataset(work / "data", folder="2_sks shape")
    base = {**VALUES, "pretrained_model_name_or_path": str(module_fake_model_dir), "train_data_dir": str(data)}
    # its step-2 state (save_state) is what a DDP run leaves: the FSDP2 test below resumes it
    assert train("finetune", work / "run", **base, output_dir=str(work / "out"), save_every_n_steps=2,
                 save_state=True) == 0
    return base, work / "out" / "finetune"


def assert_same_unet(one: Path, two: Path, start: Path) -> None:
    a, b, start_weights = unet_weights(one), unet_weights(two), unet_weights(start)
    moved = max((a[k] - start_weights[k]).abs().max().item() for k in a)
    worst = max((a[k] - b[k]).abs().max().item() for k in a)
    assert moved > 1e-2 and worst < 1e-5, f"2 processes differ from 1 process by {worst}"


def test_fsdp2_two_processes_resume_after_a_kill_to_the_one_process_weights(one_process, fake_model_dir: Path,
                                                                            tmp_path: Path) -> None:
    import torch

    from trainers.models import load_model

    base, reference = one_process

    out = tmp_path / "two"
    sharded = {**base, "output_dir": str(out), "num_processes": 2, "distributed_backend": "fsdp", "ddp_timeout": 2}
    launcher, env = sharded_launcher(tmp_path), fake_family_env(ACCELERATE_USE_CPU="1")
    killed = run_trainer(sets(**sharded, save_every_n_steps=2, save_state=True), tmp_path / "run2", launcher,
                         env={**env, "ATELIER_TEST_FAIL_RANK_AT_STEP": "1:3"}, method="finetune")
    assert killed.returncode != 0 and "injected failure on rank 1 at step 3" in killed.stderr
    start = next(e for e in events(tmp_path / "run2") if e["type"] == "start")
    assert (start["plan"]["per_device_batch"], start["plan"]["num_processes"]) == (1, 2)
    state = out / "finetune-step00000002-state"
    assert state.is_dir() and (out / "finetune-step00000002").is_dir()
    # each process wrote its own shards (the default fsdp_state_dict_type): nothing was gathered into one file
    assert manifest(state)["layout"] == "sharded" and not (state / "weights.safetensors").exists()
    assert {"shards/__0_0.distcp", "shards/__1_0.distcp", "shards/.metadata"} <= set(manifest(state)["files"])
    assert not [p for p in out.iterdir() if p.name.startswith(".")]  # no temp folder left behind by the kill

    resumed = run_trainer(sets(**sharded, resume="latest"), tmp_path / "run3", sharded_launcher(tmp_path), env=env,
                          method="finetune")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    evs = events(tmp_path / "run3")
    assert next(e for e in evs if e["type"] == "resume")["step"] == 2
    assert [e["step"] for e in evs if e["type"] == "progress"] == [3, 4]

    assert_same_unet(reference, out / "finetune", fake_model_dir)
    loaded = load_model(str(out / "finetune"), "auto", torch.float32)  # the gathered output loads as usual
    assert sum(p.numel() for p in loaded.unet.parameters()) == sum(t.numel() for t in unet_weights(reference).values())

    # one plain process resumes the same shards (re-cut into whole tensors) to the same weights
    assert train("finetune", tmp_path / "run4", **base, output_dir=str(tmp_path / "one"), resume=str(state)) == 0
    assert [e["step"] for e in events(tmp_path / "run4") if e["type"] == "progress"] == [3, 4]
    assert_same_unet(reference, tmp_path / "one" / "finetune", fake_model_dir)


def test_ddp_and_gathered_fsdp2_states_resume_across_backends_to_the_one_process_weights(
        one_process, fake_model_dir: Path, tmp_path: Path) -> None:
    """A state saved by a plain (DDP) run keys its optimizer state by position; FSDP2 shards it by parameter name.
    That FSDP2 run's gathered (FULL_STATE_DICT) step-3 state resumes in one plain process."""
    base, reference = one_process
    ddp_state = reference.parent / "finetune-step00000002-state"
    assert ddp_state.is_dir()
    values = {**base, "output_dir": str(tmp_path / "two"), "num_processes": 2, "distributed_backend": "fsdp",
              "fsdp_state_dict_type": "FULL_STATE_DICT", "ddp_timeout": 2, "resume": str(ddp_state),
              "save_every_n_steps": 3, "save_state": True}
    resumed = run_trainer(sets(**values), tmp_path / "run", sharded_launcher(tmp_path),
                          env=fake_family_env(ACCELERATE_USE_CPU="1"), method="finetune")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    evs = events(tmp_path / "run")
    assert next(e for e in evs if e["type"] == "resume")["step"] == 2
    assert [e["step"] for e in evs if e["type"] == "progress"] == [3, 4]
    assert_same_unet(reference, tmp_path / "two" / "finetune", fake_model_dir)

    gathered = tmp_path / "two" / "finetune-step00000003-state"
    assert manifest(gathered)["layout"] == "whole" and (gathered / "weights.safetensors").is_file()
    assert train("finetune", tmp_path / "run1", **base, output_dir=str(tmp_path / "one"), resume=str(gathered)) == 0
    assert [e["step"] for e in events(tmp_path / "run1") if e["type"] == "progress"] == [4]
    assert_same_unet(reference, tmp_path / "one" / "finetune", fake_model_dir)


def test_deepspeed_zero2_two_processes_resume_after_a_kill_to_the_one_process_weights(one_process,
                                                                                      fake_model_dir: Path,
                                                                                      tmp_path: Path) -> None:
    """DeepSpeed's CPU accelerator over gloo, launched with the run's DeepSpeed accelerate.yaml (ZeRO-2); its state
    is DeepSpeed's own checkpoint (each process its optimizer partition) inside the state folder."""
    base, reference = one_process
    out = tmp_path / "two"
    values = {**base, "output_dir": str(out), "num_processes": 2, "distributed_backend": "deepspeed", "ddp_timeout": 2}
    env = fake_family_env(ACCELERATE_USE_CPU="1")
    killed = run_trainer(sets(**values, save_every_n_steps=2, save_state=True), tmp_path / "run",
                         sharded_launcher(tmp_path, "deepspeed"), env={**env, "ATELIER_TEST_FAIL_RANK_AT_STEP": "1:3"},
                         method="finetune")
    assert killed.returncode != 0 and "injected failure on rank 1 at step 3" in killed.stderr
    state = out / "finetune-step00000002-state"
    files = manifest(state)["files"]
    assert manifest(state)["layout"] == "deepspeed"
    assert sum(name.endswith("optim_states.pt") for name in files) == 2  # one ZeRO partition a process

    # a plain run cannot take DeepSpeed's partitions: refused by name before training
    assert train("finetune", tmp_path / "run1", **base, output_dir=str(tmp_path / "one"), resume=str(state)) == 2
    error = events(tmp_path / "run1")[-1]
    assert error["type"] == "error" and error["message"].startswith("- resume: ")
    assert "distributed_backend = 'deepspeed' on 2 processes" in error["message"]

    resumed = run_trainer(sets(**values, resume="latest"), tmp_path / "run2", sharded_launcher(tmp_path, "deepspeed"),
                          env=env, method="finetune")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    evs = events(tmp_path / "run2")
    assert next(e for e in evs if e["type"] == "resume")["step"] == 2
    assert [e["step"] for e in evs if e["type"] == "progress"] == [3, 4]
    assert_same_unet(reference, out / "finetune", fake_model_dir)


def test_fsdp2_shards_a_lora_run_and_saves_the_same_lora_file(fake_model_dir: Path, tmp_path: Path) -> None:
    """A LoRA on a base model too big for one GPU: FSDP2 shards base and network; the file is the one-process one,
    and so is the validation loss (every process joins each validation pass's gathers)."""
    from trainers.methods.lora.file_format import read_lora_file

    data = build_dataset(tmp_path / "data", folder="2_sks shape")
    base = {**VALUES, "pretrained_model_name_or_path": str(fake_model_dir), "train_data_dir": str(data),
            "network_dim": 4, "network_alpha": 2, "max_train_steps": 2, "validation_split": 0.25,
            "validate_every_n_steps": 1, "validate_every_n_epochs": 10}
    assert train("lora", tmp_path / "run1", **base, output_dir=str(tmp_path / "one")) == 0
    two = run_trainer(sets(**base, output_dir=str(tmp_path / "two"), num_processes=2, distributed_backend="fsdp",
                           ddp_timeout=2), tmp_path / "run2", sharded_launcher(tmp_path),
                      env=fake_family_env(ACCELERATE_USE_CPU="1"))
    assert two.returncode == 0, two.stderr[-3000:]
    a, _ = read_lora_file(tmp_path / "one" / "lora.safetensors")
    b, _ = read_lora_file(tmp_path / "two" / "lora.safetensors")
    moved = max(t.abs().max().item() for k, t in a.items() if k.endswith("lora_up.weight"))  # starts at 0
    worst = max((a[k].float() - b[k].float()).abs().max().item() for k in a)
    assert a.keys() == b.keys() and moved > 1e-3 and worst < 1e-6, f"FSDP2 LoRA differs by {worst}"
    one_loss, two_loss = ([(e["step"], e["loss"]) for e in events(tmp_path / run) if e["type"] == "validation"]
                          for run in ("run1", "run2"))
    assert [s for s, _ in one_loss] == [s for s, _ in two_loss] == [1, 2]
    assert all(x == pytest.approx(y, rel=1e-5) for (_, x), (_, y) in zip(one_loss, two_loss)), (one_loss, two_loss)
