"""Several processes: the global batch, DDP equivalence and cost, failures, and DeepSpeed/FSDP configs.

The end-to-end runs use real DDP over gloo on CPU (`ACCELERATE_USE_CPU=1 accelerate launch --multi_gpu`), on the
tests' fake model family (tests/fake_family/): what they check does not depend on the model.
FSDP1 needs NVIDIA GPUs (accelerate runs CPU processes as plain DDP), so for it the generated accelerate
configs and commands are checked, parsed back by accelerate itself; FSDP2 and DeepSpeed ZeRO-2 run on
CPU too (tests/train/test_fsdp.py).
"""
from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest
import torch

from trainers.core.options import config_from_dict
from trainers.core.plan import BatchSplitError, per_device_batch, plan_steps
from trainers.demo import build_dataset
from trainers.preflight.validate import validate

from helpers import events, fake_family_env, run_trainer, sets, train, two_processes



@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_dataset(tmp_path_factory.mktemp("dist data"), folder="2_sks shape")


def _lora_args(model: Path, data: Path, out: Path, **extra: object) -> list[str]:
    values = dict(pretrained_model_name_or_path=str(model), train_data_dir=str(data), output_dir=str(out),
                  resolution="64", max_data_loader_n_workers=0, learning_rate=1e-3, network_dim=4, network_alpha=2,
                  save_precision="float", keep_global_batch=True, train_batch_size=2, max_train_steps=3)
    return sets(**{**values, **extra})


# --- the global batch ---------------------------------------------------------------------------------------------

def test_keep_global_batch_plan_and_validation_name_the_field() -> None:
    assert per_device_batch(8, 4, keep_global_batch=True) == 2 and per_device_batch(8, 4, False) == 8
    with pytest.raises(BatchSplitError, match="use a multiple of 3"):
        per_device_batch(8, 3, keep_global_batch=True)
    one = plan_steps(16, per_device_batch(4, 1, True), 1, 1, 2, None, keep_global_batch=True)
    four = plan_steps(16, per_device_batch(4, 4, True), 4, 1, 2, None, keep_global_batch=True)
    assert (one.global_batch, one.steps_per_epoch, one.total_steps) == (4, 4, 8)
    assert (four.per_device_batch, four.global_batch, four.steps_per_epoch, four.total_steps) == (1, 4, 4, 8)
    assert "per-device batch 1 x 4 processes" in four.describe() and "keep_global_batch" in four.describe()

    cfg = config_from_dict("lora", {"train_batch_size": 4, "keep_global_batch": True, "num_processes": 3,
                                    "max_train_steps": 1})
    issues = {i.field: i.message for i in validate(cfg, check_paths=False)}
    assert "splits it over 3 processes: use a multiple of 3 (e.g. 3 or 6)" in issues["train_batch_size"]
    machines = cfg.replace(num_processes=2, num_machines=3, main_process_ip="10.0.0.1")
    issues = {i.field: i.message for i in validate(machines, check_paths=False)}
    assert "6 processes (2 x 3 machines)" in issues["train_batch_size"]
    assert not [i for i in validate(cfg.replace(num_processes=2), check_paths=False) if i.field == "train_batch_size"]


def test_validate_report_shows_per_device_and_global_batch(dataset: Path) -> None:
    from gui.checks import check_form

    values = {"train_data_dir": str(dataset), "train_batch_size": 4, "keep_global_batch": True, "num_processes": 2,
              "max_train_epochs": 2}
    report = check_form("lora", values)
    # 8 images x 2 repeats = 16 samples / global batch 4 = 4 steps an epoch on any number of processes
    assert "per-device batch **2** x 2 processes" in report.steps and "global batch **4**" in report.steps
    assert "**4 steps per epoch**" in report.steps and "**8 steps** in total" in report.steps
    bad = check_form("lora", {**values, "num_processes": 3})
    assert any(i.field == "train_batch_size" and "multiple of 3" in i.message for i in bad.issues)
    assert "train_batch_size" in "".join(bad.by_group().get("optimizer", []))


# --- DDP end to end -----------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_two_processes_reproduce_one_process_with_few_collectives(fake_model_dir: Path, dataset: Path,
                                                                   tmp_path: Path) -> None:
    from trainers.methods.lora.file_format import read_lora_file

    # AdamW with eps = 1 moves each weight in proportion to its gradient (plain Adam would hide a wrongly
    # scaled gradient, e.g. a loss averaged over the wrong count): the comparison sees the gradients themselves.
    linear = {"learning_rate": 1.0, "optimizer_args": ["eps=1.0"]}
    # the one-process reference trains in this process (its --set pairs' values)
    assert train("lora", tmp_path / "run1", *_lora_args(fake_model_dir, dataset, tmp_path / "one", **linear)[1::2]) == 0
    two = run_trainer(_lora_args(fake_model_dir, dataset, tmp_path / "two", num_processes=2, **linear),
                      tmp_path / "run2", two_processes(),
                      env=fake_family_env(ACCELERATE_USE_CPU="1",
                                          ATELIER_TEST_COUNT_COLLECTIVES=str(tmp_path / "counts")))
    assert two.returncode == 0, two.stderr[-3000:]

    a, _ = read_lora_file(tmp_path / "one" / "lora.safetensors")
    b, _ = read_lora_file(tmp_path / "two" / "lora.safetensors")
    gradients = sum(k.endswith(".weight") for k in a)  # the fake family's LoRA: 10 modules, 20 trained tensors
    assert a.keys() == b.keys() and gradients >= 20
    moved = max(t.abs().max().item() for k, t in a.items() if k.endswith("lora_up.weight"))  # starts at 0
    worst = max((a[k].float() - b[k].float()).abs().max().item() for k in a)
    assert moved > 1e-3 and worst < 1e-6, f"2 processes x batch 1 differ from 1 process x batch 2 by {worst}"
    assert [p.name for p in (tmp_path / "two").iterdir()] == ["lora.safetensors"], "one output file, from rank 0"

    evs = events(tmp_path / "run2")
    plan = next(e for e in evs if e["type"] == "start")["plan"]
    assert (plan["per_device_batch"], plan["num_processes"], plan["global_batch"]) == (1, 2, 2)
    progress = [e for e in evs if e["type"] == "progress"]
    assert [e["step"] for e in progress] == [1, 2, 3] and progress[-1]["images_per_s"] > 0
    # every LoRA gradient in one or two buckets: a handful of collectives a step, not one a tensor
    assert all(1 <= e["grad_buckets"] <= 2 for e in progress), [e["grad_buckets"] for e in progress]
    counted = [json.loads(line) for line in (tmp_path / "counts").read_text().splitlines()]
    steady = [c["collectives"] for c in counted if c["rank"] == 0][1:]  # buckets + loss average + stop/save poll
    assert steady and all(c <= 4 < gradients for c in steady), steady
    assert len(progress[-1]["rank_step_s"]) == 2 and all(t > 0 for t in progress[-1]["rank_step_s"])


@pytest.mark.slow
def test_a_failing_rank_stops_the_whole_run_with_its_error(fake_model_dir: Path, dataset: Path,
                                                           tmp_path: Path) -> None:
    started = time.monotonic()
    result = run_trainer(_lora_args(fake_model_dir, dataset, tmp_path / "o", num_processes=2, max_train_steps=50,
                                    ddp_gradient_precision="bf16"),
                         tmp_path / "run", two_processes(),
                         env=fake_family_env(ACCELERATE_USE_CPU="1", ATELIER_TEST_FAIL_RANK_AT_STEP="1:2"))
    assert result.returncode != 0
    assert time.monotonic() - started < 120, "no hang: the launcher stops the other rank"
    assert "injected failure on rank 1 at step 2" in result.stderr
    evs = events(tmp_path / "run")
    assert any(e["type"] == "progress" and e["step"] == 1 and e["grad_buckets"] >= 1 for e in evs), "bf16 hook ran"
    errors = [e for e in evs if e["type"] == "error"]
    assert errors and "rank 1" in errors[0]["message"] and "injected failure" in errors[0]["message"]
    status = json.loads((tmp_path / "run" / "status.json").read_text())
    assert status["state"] == "failed" and "injected failure" in status["message"]
    assert not (tmp_path / "o" / "lora.safetensors").exists()


def test_straggler_is_named_and_handlers_carry_timeout_and_buckets() -> None:
    from trainers.train.distributed import BUCKET_CAP_MB, StragglerCheck, accelerator_handlers

    check = StragglerCheck(accelerator=None)
    warning = check.judge([1.0, 1.05, 1.4, 0.98])
    assert warning and warning.startswith("rank 2 is 40% slower than the others")
    assert check.judge([1.0, 1.05, 1.4, 0.98]) is None, "each rank is reported once"
    assert check.judge([1.0, 1.15]) is None
    cfg = config_from_dict("lora", {"ddp_timeout": 600, "gradient_checkpointing": True})
    ddp, init = accelerator_handlers(cfg)
    assert ddp.to_kwargs() == {"bucket_cap_mb": BUCKET_CAP_MB, "gradient_as_bucket_view": True, "static_graph": True}
    assert init.timeout.total_seconds() == 600 * 60


# --- DeepSpeed and FSDP: configs, commands, validation ------------------------------------------------------------

def _full(**values: object):
    return config_from_dict("finetune", {"num_processes": 2, "max_train_steps": 1, "mixed_precision": "bf16",
                                         **values})


@pytest.mark.parametrize("values, kind, section", [
    ({"distributed_backend": "deepspeed", "zero_stage": 1}, "DEEPSPEED",
     {"zero_stage": 1, "offload_optimizer_device": "none"}),
    ({"distributed_backend": "deepspeed", "zero_stage": 2, "offload_optimizer": True, "max_grad_norm": 0.5},
     "DEEPSPEED", {"zero_stage": 2, "offload_optimizer_device": "cpu", "gradient_clipping": 0.5}),
    ({"distributed_backend": "deepspeed", "zero_stage": 3}, "DEEPSPEED", {"zero_stage": 3, "zero3_save_16bit_model": True}),
    ({"distributed_backend": "fsdp", "gradient_accumulation_steps": 2}, "FSDP",
     {"fsdp_version": 2, "fsdp_reshard_after_forward": True, "fsdp_state_dict_type": "SHARDED_STATE_DICT"}),
    ({"distributed_backend": "fsdp", "fsdp_state_dict_type": "FULL_STATE_DICT"}, "FSDP",
     {"fsdp_version": 2, "fsdp_state_dict_type": "FULL_STATE_DICT"}),
    ({"distributed_backend": "fsdp", "fsdp_version": 1}, "FSDP",
     {"fsdp_version": 1, "fsdp_sharding_strategy": "FULL_SHARD", "fsdp_use_orig_params": True}),
])
def test_accelerate_yaml_per_backend_parses_back(values: dict, kind: str, section: dict, tmp_path: Path) -> None:
    from accelerate.commands.config.config_args import load_config_from_file

    from trainers.core.launch import accelerate_command, write_accelerate_config

    cfg = _full(**values)
    path = write_accelerate_config(cfg, tmp_path)
    assert path == tmp_path / "accelerate.yaml"
    loaded = load_config_from_file(str(path))
    assert loaded.distributed_type == kind and loaded.num_processes == 2 and loaded.mixed_precision == "bf16"
    found = loaded.deepspeed_config if kind == "DEEPSPEED" else loaded.fsdp_config
    assert {k: found[k] for k in section} == section
    cmd = accelerate_command(cfg, tmp_path / "config.toml", tmp_path, python="py")
    assert cmd[cmd.index("--config_file") + 1] == str(path) and "--multi_gpu" not in cmd
    assert cmd[cmd.index("--num_processes") + 1] == "2"
    # accelerate's own launcher reads the command and the file as DeepSpeed / FSDP
    from accelerate.commands.launch import _validate_launch_command, launch_command_parser

    args = _validate_launch_command(launch_command_parser().parse_args(cmd[3:]))[0]
    assert (args.use_deepspeed, args.use_fsdp, args.num_processes) == (kind == "DEEPSPEED", kind == "FSDP", 2)


@pytest.mark.slow
def test_ddp_runs_need_no_accelerate_yaml_and_headless_users_can_print_one(tmp_path: Path) -> None:
    import subprocess

    import yaml

    from trainers.core.launch import accelerate_command, write_accelerate_config

    cfg = _full()
    assert write_accelerate_config(cfg, tmp_path) is None and not (tmp_path / "accelerate.yaml").exists()
    cmd = accelerate_command(cfg, tmp_path / "config.toml", tmp_path, python="py")
    assert "--multi_gpu" in cmd and "--config_file" not in cmd
    printed = subprocess.run([sys.executable, "-m", "trainers", "accelerate-config", "--set", "num_processes=4",
                              "--set", 'distributed_backend="deepspeed"', "--set", "zero_stage=1"],
                             capture_output=True, text=True, timeout=120, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert printed.returncode == 0, printed.stderr
    loaded = yaml.safe_load(printed.stdout)
    assert loaded["distributed_type"] == "DEEPSPEED" and loaded["deepspeed_config"]["zero_stage"] == 1


def test_gui_start_writes_accelerate_yaml_and_names_it_in_the_command(tmp_path: Path, monkeypatch) -> None:
    import subprocess

    from gui.jobs import JobManager

    launched: list[list[str]] = []

    class FakeProc:
        pid = 99999

        def wait(self) -> int:
            return 0

    monkeypatch.setattr(subprocess, "Popen", lambda argv, **kw: launched.append(argv) or FakeProc())
    cfg = _full(distributed_backend="fsdp", output_dir=str(tmp_path / "o"))
    run_dir = JobManager(tmp_path / "runs").start(cfg)
    assert (run_dir / "accelerate.yaml").is_file()
    assert launched[0][launched[0].index("--config_file") + 1] == str(run_dir / "accelerate.yaml")
    assert str(run_dir / "accelerate.yaml") in (run_dir / "command.txt").read_text()


def test_validation_rejects_impossible_combinations_with_a_reason() -> None:
    def problems(method: str = "finetune", **values: object) -> dict[str, str]:
        from trainers.core.options.validation import distributed_issues
        from trainers.methods import rules_for

        cfg = config_from_dict(method, {"num_processes": 2, "max_train_steps": 1, "mixed_precision": "bf16", **values})
        return {i.field: i.message for i in distributed_issues(cfg) + rules_for(method).issues(cfg)}

    lora = problems("lora", distributed_backend="deepspeed")
    assert "a LoRA's few weights train fastest with 'ddp'" in lora["distributed_backend"]
    assert "'fsdp' with fsdp_version = 2 when the base model" in lora["distributed_backend"]
    assert "FSDP1 shards" in problems("lora", distributed_backend="fsdp", fsdp_version=1)["distributed_backend"]
    assert not problems("lora", distributed_backend="fsdp"), "FSDP2 shards a large base model under a LoRA"
    eight = problems(distributed_backend="fsdp", optimizer_type="AdamW8bit")
    assert "AdamW8bit (bitsandbytes)" in eight["optimizer_type"] and "choose 'AdamW'" in eight["optimizer_type"]
    assert "set distributed_backend = 'deepspeed'" in problems(offload_optimizer=True)["offload_optimizer"]
    assert "only" in problems(distributed_backend="fsdp", ddp_gradient_precision="bf16")["ddp_gradient_precision"]
    assert "FSDP shards" in problems(distributed_backend="fsdp", use_ema="gpu")["use_ema"]
    zero = problems(distributed_backend="deepspeed", full_bf16=True, offload_optimizer=True,
                    optimizer_type="Adafactor")
    assert "turn full_bf16 off" in zero["full_bf16"] and "set optimizer_type = 'AdamW'" in zero["offload_optimizer"]
    import importlib.util

    if importlib.util.find_spec("deepspeed") is None:
        assert "DeepSpeed is not installed: pip install deepspeed" in zero["distributed_backend"]
    assert not problems(distributed_backend="fsdp")
    samples = problems(distributed_backend="fsdp", sample_prompt_lines=["a red circle"])["sample_prompts"]
    assert samples.startswith("FSDP leaves each process only shards") and "Generate tab" in samples
    assert not problems("lora", ddp_gradient_precision="bf16", ddp_timeout=600)
    swap = problems("lora", blocks_to_swap=2, gradient_checkpointing=True)["blocks_to_swap"]
    assert "works in one process only" in swap and "Set num_processes = 1" in swap
    assert "layer_offload_fraction" in problems(layer_offload_fraction=0.5, gradient_checkpointing=True)
    assert not problems("lora", num_processes=1, blocks_to_swap=2, gradient_checkpointing=True)


def test_resume_is_refused_only_under_fsdp1() -> None:
    from trainers.core.options.validation import option_issues

    def resume_problem(**values: object) -> str | None:
        cfg = config_from_dict("finetune", {"num_processes": 2, "max_train_steps": 1, "resume": "latest", **values})
        return {i.field: i.message for i in option_issues(cfg, check_paths=False)}.get("resume")

    assert "not saved or resumed with FSDP1" in resume_problem(distributed_backend="fsdp", fsdp_version=1)
    assert resume_problem(distributed_backend="fsdp") is None  # sharded states (the default)
    assert resume_problem(distributed_backend="fsdp", fsdp_state_dict_type="FULL_STATE_DICT") is None
    assert resume_problem(distributed_backend="deepspeed", zero_stage=3) is None


@pytest.mark.slow
@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU refusal")
def test_fsdp1_on_cpu_is_refused_with_a_reason(fake_model_dir: Path, dataset: Path, tmp_path: Path) -> None:
    """accelerate runs CPU processes as plain DDP (MULTI_CPU): an FSDP1 run on CPU would silently not shard."""
    args = sets(pretrained_model_name_or_path=str(fake_model_dir), train_data_dir=str(dataset),
                output_dir=str(tmp_path / "o"), resolution="64", max_train_steps=1, distributed_backend="fsdp",
                fsdp_version=1)
    result = run_trainer(args, tmp_path / "run", method="finetune", env=fake_family_env(ACCELERATE_USE_CPU="1"))
    assert result.returncode == 2 and "'fsdp' with fsdp_version = 1 needs NVIDIA GPUs" in result.stderr
    assert "set fsdp_version = 2" in result.stderr
    assert os.path.exists(tmp_path / "run" / "events.jsonl")


def test_partial_global_batches_average_like_one_process() -> None:
    """A bucket's last, uneven global batch: the loss averaged over processes equals one process's batch mean."""
    import random

    from trainers.data.buckets import BucketBatchSampler

    buckets = ["a"] * 7 + ["b"] * 5 + ["c"] * 2  # 4 samples a global batch: partial batches of 3, 1 and 2
    losses = [random.Random(i).uniform(0.5, 2.0) for i in range(len(buckets))]

    def trained(per_device: int, processes: int) -> list[float]:
        """What each optimizer step's gradient averages: DDP's mean over processes of each process's batch mean."""
        sampler = BucketBatchSampler(buckets, {b: per_device for b in "abc"}, processes, seed=3)
        out = []
        for group in sampler.epoch_groups(0):
            means = []
            for batch in group:
                weights = [0.0 if key[2] else (key[3] if len(key) > 3 else 1.0) for key in batch]
                means.append(sum(w * losses[key[1]] for w, key in zip(weights, batch)) / len(batch))
            out.append(sum(means) / processes)
        return out

    one, two, four = trained(4, 1), trained(2, 2), trained(1, 4)
    assert len(one) == len(two) == len(four) == 5
    assert one == pytest.approx(two) and one == pytest.approx(four)


def test_a_launch_that_does_not_match_distributed_backend_is_refused() -> None:
    from types import SimpleNamespace

    from accelerate.utils import DistributedType

    from trainers.core.options import ConfigError
    from trainers.train.distributed import check_launch

    ddp_launch = SimpleNamespace(distributed_type=DistributedType.MULTI_GPU)
    with pytest.raises(ConfigError, match="launched for 'ddp': launch with `accelerate launch --config_file"):
        check_launch(_full(distributed_backend="deepspeed"), ddp_launch)
    with pytest.raises(ConfigError, match="set distributed_backend = 'fsdp'"):
        check_launch(_full(), SimpleNamespace(distributed_type=DistributedType.FSDP, state=None))
    check_launch(_full(), ddp_launch)

    def fsdp_launch(version: int) -> SimpleNamespace:
        return SimpleNamespace(distributed_type=DistributedType.FSDP,
                               state=SimpleNamespace(fsdp_plugin=SimpleNamespace(fsdp_version=version)))

    check_launch(_full(distributed_backend="fsdp"), fsdp_launch(2))
    with pytest.raises(ConfigError, match="fsdp_version: is 2 but the processes were launched with FSDP1"):
        check_launch(_full(distributed_backend="fsdp"), fsdp_launch(1))


def test_cpu_processes_refuse_only_what_cannot_shard_there(monkeypatch) -> None:
    from trainers.core.options import ConfigError
    from trainers.train.distributed import check_backend_device

    monkeypatch.setenv("ACCELERATE_USE_CPU", "1")
    check_backend_device(_full(distributed_backend="fsdp"))  # FSDP2 and ZeRO-2 run on CPU (tests/train/test_fsdp.py)
    check_backend_device(_full(distributed_backend="deepspeed", zero_stage=2))
    with pytest.raises(ConfigError, match="zero_stage: 3 needs NVIDIA GPUs .* use zero_stage = 2"):
        check_backend_device(_full(distributed_backend="deepspeed", zero_stage=3))
    with pytest.raises(ConfigError, match="fsdp_version = 1 needs NVIDIA GPUs"):
        check_backend_device(_full(distributed_backend="fsdp", fsdp_version=1))


def test_a_sharded_state_that_the_main_machine_cannot_see_whole_fails_naming_output_dir(tmp_path: Path,
                                                                                        monkeypatch) -> None:
    """Several machines: each writes its shards into output_dir; one that is not shared storage would leave the
    state without the other machines' shards, so the save fails instead of writing an incomplete state."""
    from types import SimpleNamespace

    import accelerate.utils

    from trainers.train.state import _check_shared

    (tmp_path / "shards").mkdir()
    (tmp_path / "shards" / "__0_0.distcp").write_bytes(b"rank 0")
    machines = SimpleNamespace(num_processes=2, is_main_process=True)
    monkeypatch.setattr(accelerate.utils, "gather_object", lambda mine: mine + ["shards/__0_0.distcp"])
    _check_shared(machines, tmp_path)  # the other process wrote into the same folder: fine
    monkeypatch.setattr(accelerate.utils, "gather_object", lambda mine: mine + ["shards/__1_0.distcp"])
    with pytest.raises(RuntimeError, match="output_dir must be storage every machine shares"):
        _check_shared(machines, tmp_path)
