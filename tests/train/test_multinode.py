"""Two "machines" on one host: the launch command Atelier prints for machine 0 and machine 1 (`--num_machines 2
--machine_rank 0/1 --main_process_ip 127.0.0.1`), run as two launcher groups over loopback (gloo on CPU), train the
same images with the same schedule to the same weights as one process with the whole batch, on the tests' fake model
family (tests/fake_family/)."""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from trainers.core.launch import accelerate_command, launch_env
from trainers.core.options import config_from_dict
from trainers.demo import build_dataset

from helpers import REPO, events, fake_family_env, free_port, train

pytestmark = pytest.mark.slow

VALUES = {"resolution": "64", "max_data_loader_n_workers": 0, "learning_rate": 1.0, "optimizer_args": ["eps=1.0"],
          "network_dim": 4, "network_alpha": 2, "save_precision": "float", "keep_global_batch": True,
          "train_batch_size": 2, "max_train_steps": 3, "lr_scheduler": "linear"}


def test_two_machines_train_what_one_process_trains(fake_model_dir: Path, tmp_path: Path) -> None:
    from trainers.methods.lora.file_format import read_lora_file

    data = build_dataset(tmp_path / "data", folder="2_sks shape")
    base = {**VALUES, "pretrained_model_name_or_path": str(fake_model_dir), "train_data_dir": str(data)}
    assert train("lora", tmp_path / "one", **base, output_dir=str(tmp_path / "out1")) == 0

    cfg = config_from_dict("lora", {**base, "output_dir": str(tmp_path / "out2"), "num_machines": 2,
                                    "main_process_ip": "127.0.0.1", "main_process_port": free_port(),
                                    "ddp_timeout": 2})
    run_dir = tmp_path / "two"  # on "shared storage": both machines name the same run folder
    run_dir.mkdir()
    cfg.save(run_dir / "config.toml")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", **fake_family_env(), **launch_env(cfg)}
    machines = [subprocess.Popen(accelerate_command(cfg, run_dir / "config.toml", run_dir, machine_rank=rank),
                                 cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
                for rank in (0, 1)]
    outputs = [m.communicate(timeout=400)[0] for m in machines]
    assert [m.returncode for m in machines] == [0, 0], outputs[0][-2000:] + outputs[1][-2000:]

    one, two = events(tmp_path / "one"), events(run_dir)
    plan = next(e for e in two if e["type"] == "start")["plan"]
    assert (plan["per_device_batch"], plan["num_processes"], plan["global_batch"]) == (1, 2, 2)
    steps = [[(e["step"], e["lr"]) for e in evs if e["type"] == "progress"] for evs in (one, two)]
    assert steps[0] == steps[1] and len(steps[0]) == 3, "the same schedule, step by step"
    losses = [[e["loss"] for e in evs if e["type"] == "progress"] for evs in (one, two)]
    assert losses[1] == pytest.approx(losses[0], abs=1e-5), "the same images and noise each step"
    a, _ = read_lora_file(tmp_path / "out1" / "lora.safetensors")
    b, _ = read_lora_file(tmp_path / "out2" / "lora.safetensors")
    worst = max((a[k].float() - b[k].float()).abs().max().item() for k in a)
    assert a.keys() == b.keys() and worst < 1e-6, f"two machines differ from one process by {worst}"
