"""FSDP2 and DeepSpeed ZeRO-2 for real: 2 CPU processes over gloo, launched with the run's accelerate.yaml.

Against one plain one-process finetune: an FSDP2 run on 2 processes x batch 1 that saves a sharded-then-gathered
training state at step 2 and is killed at step 3 (a rank fails), then resumed, must end on its weights and write a
diffusers folder that loads; so must a ZeRO-2 run, and an FSDP2 run resumed from the one-process (DDP) run's step-2
state. An FSDP2 LoRA saves the one-process LoRA file and reports the one-process validation loss.
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

from trainers.core.options import config_from_dict
from trainers.demo import build_dataset

from helpers import events, free_port, hook_env, run_trainer, sets, train

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


def unet_weights(folder: Path) -> dict:
    from safetensors.torch import load_file

    return load_file(folder / "unet" / "diffusion_pytorch_model.safetensors")


@pytest.fixture(scope="module")
def one_process(tiny_sd1_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, Path]:
    """(options, output folder) of a plain one-process finetune: what the sharded runs must reproduce."""
    work = tmp_path_factory.mktemp("one process")
    data = build_dataset(work / "data", folder="2_sks shape")
    base = {**VALUES, "pretrained_model_name_or_path": str(tiny_sd1_dir), "train_data_dir": str(data)}
    # its step-2 state (save_state) is what a DDP run leaves: the FSDP2 test below resumes it
    assert train("finetune", work / "run", **base, output_dir=str(work / "out"), save_every_n_steps=2,
                 save_state=True) == 0
    return base, work / "out" / "finetune"


def assert_same_unet(one: Path, two: Path, start: Path) -> None:
    a, b, start_weights = unet_weights(one), unet_weights(two), unet_weights(start)
    moved = max((a[k] - start_weights[k]).abs().max().item() for k in a)
    worst = max((a[k] - b[k]).abs().max().item() for k in a)
    assert moved > 1e-2 and worst < 1e-5, f"2 processes differ from 1 process by {worst}"


def test_fsdp2_two_processes_resume_after_a_kill_to_the_one_process_weights(one_process, tiny_sd1_dir: Path,
                                                                            tmp_path: Path) -> None:
    from diffusers import StableDiffusionPipeline

    base, reference = one_process

    out = tmp_path / "two"
    sharded = {**base, "output_dir": str(out), "num_processes": 2, "distributed_backend": "fsdp", "ddp_timeout": 2}
    launcher, env = sharded_launcher(tmp_path), hook_env(ACCELERATE_USE_CPU="1")
    killed = run_trainer(sets(**sharded, save_every_n_steps=2, save_state=True), tmp_path / "run2", launcher,
                         env={**env, "ATELIER_TEST_FAIL_RANK_AT_STEP": "1:3"}, method="finetune")
    assert killed.returncode != 0 and "injected failure on rank 1 at step 3" in killed.stderr
    start = next(e for e in events(tmp_path / "run2") if e["type"] == "start")
    assert (start["plan"]["per_device_batch"], start["plan"]["num_processes"]) == (1, 2)
    assert (out / "finetune-step00000002-state").is_dir() and (out / "finetune-step00000002").is_dir()

    resumed = run_trainer(sets(**sharded, resume="latest"), tmp_path / "run3", sharded_launcher(tmp_path), env=env,
                          method="finetune")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    evs = events(tmp_path / "run3")
    assert next(e for e in evs if e["type"] == "resume")["step"] == 2
    assert [e["step"] for e in evs if e["type"] == "progress"] == [3, 4]

    assert_same_unet(reference, out / "finetune", tiny_sd1_dir)
    pipe = StableDiffusionPipeline.from_pretrained(out / "finetune")  # the gathered output loads as usual
    assert sum(p.numel() for p in pipe.unet.parameters()) == sum(t.numel() for t in unet_weights(reference).values())


def test_a_ddp_state_resumes_into_fsdp2_on_two_processes_to_the_one_process_weights(one_process, tiny_sd1_dir: Path,
                                                                                    tmp_path: Path) -> None:
    """A state saved by a plain (DDP) run keys its optimizer state by position; FSDP2 shards it by parameter name."""
    base, reference = one_process
    ddp_state = reference.parent / "finetune-step00000002-state"
    assert ddp_state.is_dir()
    values = {**base, "output_dir": str(tmp_path / "two"), "num_processes": 2, "distributed_backend": "fsdp",
              "ddp_timeout": 2, "resume": str(ddp_state)}
    resumed = run_trainer(sets(**values), tmp_path / "run", sharded_launcher(tmp_path),
                          env=hook_env(ACCELERATE_USE_CPU="1"), method="finetune")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    evs = events(tmp_path / "run")
    assert next(e for e in evs if e["type"] == "resume")["step"] == 2
    assert [e["step"] for e in evs if e["type"] == "progress"] == [3, 4]
    assert_same_unet(reference, tmp_path / "two" / "finetune", tiny_sd1_dir)


def test_deepspeed_zero2_two_processes_train_the_one_process_weights(one_process, tiny_sd1_dir: Path,
                                                                     tmp_path: Path) -> None:
    """DeepSpeed's CPU accelerator over gloo, launched with the run's DeepSpeed accelerate.yaml (ZeRO-2)."""
    base, reference = one_process
    values = {**base, "output_dir": str(tmp_path / "two"), "num_processes": 2, "distributed_backend": "deepspeed",
              "ddp_timeout": 2}
    result = run_trainer(sets(**values), tmp_path / "run", sharded_launcher(tmp_path, "deepspeed"),
                         env=hook_env(ACCELERATE_USE_CPU="1"), method="finetune")
    assert result.returncode == 0, result.stderr[-3000:]
    assert_same_unet(reference, tmp_path / "two" / "finetune", tiny_sd1_dir)


def test_fsdp2_shards_a_lora_run_and_saves_the_same_lora_file(tiny_sd1_dir: Path, tmp_path: Path) -> None:
    """A LoRA on a base model too big for one GPU: FSDP2 shards base and network; the file is the one-process one,
    and so is the validation loss (every process joins each validation pass's gathers)."""
    from trainers.methods.lora.file_format import read_lora_file

    data = build_dataset(tmp_path / "data", folder="2_sks shape")
    base = {**VALUES, "pretrained_model_name_or_path": str(tiny_sd1_dir), "train_data_dir": str(data),
            "network_dim": 4, "network_alpha": 2, "max_train_steps": 2, "validation_split": 0.25,
            "validate_every_n_steps": 1, "validate_every_n_epochs": 10}
    assert train("lora", tmp_path / "run1", **base, output_dir=str(tmp_path / "one")) == 0
    two = run_trainer(sets(**base, output_dir=str(tmp_path / "two"), num_processes=2, distributed_backend="fsdp",
                           ddp_timeout=2), tmp_path / "run2", sharded_launcher(tmp_path),
                      env=hook_env(ACCELERATE_USE_CPU="1"))
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
