"""FSDP2 for real: 2 CPU processes over gloo (torch's fully_shard, launched with the run's accelerate.yaml).

The finetune test, three short runs: a plain one-process finetune; an FSDP2 run on 2 processes x batch 1 that saves a
sharded-then-gathered training state at step 2 and is killed at step 3 (a rank fails); its resume, which must end
on the one-process run's weights and write a diffusers folder that loads.
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


def fsdp_launcher(tmp_path: Path) -> list[str]:
    """`accelerate launch` with the accelerate.yaml Atelier writes for distributed_backend = 'fsdp' (FSDP2)."""
    from trainers.core.launch import write_accelerate_config

    cfg = config_from_dict("finetune", {"num_processes": 2, "distributed_backend": "fsdp", "max_train_steps": 1})
    path = write_accelerate_config(cfg, tmp_path)
    return [sys.executable, "-m", "accelerate.commands.launch", "--config_file", str(path),
            "--main_process_port", str(free_port())]


def unet_weights(folder: Path) -> dict:
    from safetensors.torch import load_file

    return load_file(folder / "unet" / "diffusion_pytorch_model.safetensors")


def test_fsdp2_two_processes_resume_after_a_kill_to_the_one_process_weights(tiny_sd1_dir: Path,
                                                                            tmp_path: Path) -> None:
    from diffusers import StableDiffusionPipeline

    data = build_dataset(tmp_path / "data", folder="2_sks shape")
    base = {**VALUES, "pretrained_model_name_or_path": str(tiny_sd1_dir), "train_data_dir": str(data)}
    assert train("finetune", tmp_path / "run1", **base, output_dir=str(tmp_path / "one")) == 0

    out = tmp_path / "two"
    sharded = {**base, "output_dir": str(out), "num_processes": 2, "distributed_backend": "fsdp", "ddp_timeout": 2}
    launcher, env = fsdp_launcher(tmp_path), hook_env(ACCELERATE_USE_CPU="1")
    killed = run_trainer(sets(**sharded, save_every_n_steps=2, save_state=True), tmp_path / "run2", launcher,
                         env={**env, "ATELIER_TEST_FAIL_RANK_AT_STEP": "1:3"}, method="finetune")
    assert killed.returncode != 0 and "injected failure on rank 1 at step 3" in killed.stderr
    start = next(e for e in events(tmp_path / "run2") if e["type"] == "start")
    assert (start["plan"]["per_device_batch"], start["plan"]["num_processes"]) == (1, 2)
    assert (out / "finetune-step00000002-state").is_dir() and (out / "finetune-step00000002").is_dir()

    resumed = run_trainer(sets(**sharded, resume="latest"), tmp_path / "run3", fsdp_launcher(tmp_path), env=env,
                          method="finetune")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    evs = events(tmp_path / "run3")
    assert next(e for e in evs if e["type"] == "resume")["step"] == 2
    assert [e["step"] for e in evs if e["type"] == "progress"] == [3, 4]

    one, two = unet_weights(tmp_path / "one" / "finetune"), unet_weights(out / "finetune")
    start_weights = unet_weights(tiny_sd1_dir)
    moved = max((one[k] - start_weights[k]).abs().max().item() for k in one)
    worst = max((one[k] - two[k]).abs().max().item() for k in one)
    assert moved > 1e-2 and worst < 1e-5, f"FSDP2 2 processes + resume differ from 1 process by {worst}"
    pipe = StableDiffusionPipeline.from_pretrained(out / "finetune")  # the gathered output loads as usual
    assert sum(p.numel() for p in pipe.unet.parameters()) == sum(t.numel() for t in two.values())


def test_fsdp2_shards_a_lora_run_and_saves_the_same_lora_file(tiny_sd1_dir: Path, tmp_path: Path) -> None:
    """A LoRA on a base model too big for one GPU: FSDP2 shards base and network; the file is the one-process one."""
    from trainers.methods.lora.file_format import read_lora_file

    data = build_dataset(tmp_path / "data", folder="2_sks shape")
    base = {**VALUES, "pretrained_model_name_or_path": str(tiny_sd1_dir), "train_data_dir": str(data),
            "network_dim": 4, "network_alpha": 2, "max_train_steps": 2}
    assert train("lora", tmp_path / "run1", **base, output_dir=str(tmp_path / "one")) == 0
    two = run_trainer(sets(**base, output_dir=str(tmp_path / "two"), num_processes=2, distributed_backend="fsdp",
                           ddp_timeout=2), tmp_path / "run2", fsdp_launcher(tmp_path),
                      env=hook_env(ACCELERATE_USE_CPU="1"))
    assert two.returncode == 0, two.stderr[-3000:]
    a, _ = read_lora_file(tmp_path / "one" / "lora.safetensors")
    b, _ = read_lora_file(tmp_path / "two" / "lora.safetensors")
    moved = max(t.abs().max().item() for k, t in a.items() if k.endswith("lora_up.weight"))  # starts at 0
    worst = max((a[k].float() - b[k].float()).abs().max().item() for k in a)
    assert a.keys() == b.keys() and moved > 1e-3 and worst < 1e-6, f"FSDP2 LoRA differs by {worst}"
