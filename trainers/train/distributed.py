"""Several processes: the per-run accelerate config, DDP settings, and per-rank step timing.

`accelerate_config()` and `write_accelerate_config()` are torch-free (the GUI writes accelerate.yaml);
everything that touches torch imports it inside the function.

DDP: gradients are reduced in a few large buckets (`BUCKET_CAP_MB`) through one Python comm hook,
`RankTimer.hook` (registered in prepare() by `install_rank_timer`), which also notes when this
rank's gradients are ready (its own work, without waiting for the others), so a slow rank can be
named. `ddp_gradient_precision` picks plain all-reduce or torch's bf16/fp16 compression hooks.
"""
from __future__ import annotations

import contextlib
import os
import statistics
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

from trainers.core.options import TrainConfig

BUCKET_CAP_MB = 100  # a LoRA's gradients fit in one or two buckets; a full SDXL UNet in ~100
FSDP_MIN_NUM_PARAMS = 10_000_000  # FSDP wraps (and gathers) submodules of at least this many parameters
ACCELERATE_CONFIG = "accelerate.yaml"
COUNT_ENV = "ATELIER_COUNT_COLLECTIVES"  # tests: count torch.distributed calls per step (CollectiveCounter)
FAIL_ENV = "ATELIER_FAIL_RANK_AT_STEP"  # tests: "RANK:STEP" makes that rank raise at that step
STRAGGLER_EVERY = 20  # steps between comparisons of the ranks' step times (one small all_gather)
STRAGGLER_RATIO = 1.2  # a rank this much slower than the median of the others is reported


def total_processes(cfg: TrainConfig) -> int:
    return cfg.num_processes * cfg.num_machines


def needs_config_file(cfg: TrainConfig) -> bool:
    """DeepSpeed and FSDP are configured through an accelerate config file; DDP needs only launch flags."""
    return cfg.distributed_backend != "ddp"


def accelerate_config(cfg: TrainConfig) -> dict[str, Any]:
    """The accelerate config (as `accelerate config` writes it) for this run's launch options."""
    total = total_processes(cfg)
    out: dict[str, Any] = {
        "compute_environment": "LOCAL_MACHINE",
        "debug": False,
        "distributed_type": "MULTI_GPU" if total > 1 else "NO",
        "downcast_bf16": "no",
        "machine_rank": cfg.machine_rank,
        "main_training_function": "main",
        "mixed_precision": cfg.mixed_precision,
        "num_machines": cfg.num_machines,
        "num_processes": total,
        "rdzv_backend": "static",
        "same_network": True,
        "tpu_env": [],
        "tpu_use_cluster": False,
        "tpu_use_sudo": False,
        "use_cpu": False,
    }
    if cfg.gpu_ids.strip():
        out["gpu_ids"] = cfg.gpu_ids.replace(" ", "")
    if cfg.num_machines > 1:
        out["main_process_ip"] = cfg.main_process_ip
        out["main_process_port"] = cfg.main_process_port
    if cfg.dynamo_backend != "no":
        out["dynamo_config"] = {"dynamo_backend": cfg.dynamo_backend.upper()}
    if cfg.distributed_backend == "deepspeed":
        out["distributed_type"] = "DEEPSPEED"
        out["deepspeed_config"] = {
            "zero_stage": cfg.zero_stage,
            "offload_optimizer_device": "cpu" if cfg.offload_optimizer else "none",
            "offload_param_device": "none",
            "gradient_accumulation_steps": cfg.gradient_accumulation_steps,
            "gradient_clipping": float(cfg.max_grad_norm),  # DeepSpeed clips; accelerate's clip_grad_norm_ defers
            "zero3_init_flag": False,
        }
    elif cfg.distributed_backend == "fsdp":
        out["distributed_type"] = "FSDP"
        out["fsdp_config"] = {
            "fsdp_version": 1,
            "fsdp_sharding_strategy": "FULL_SHARD",
            "fsdp_auto_wrap_policy": "SIZE_BASED_WRAP",
            "fsdp_min_num_params": FSDP_MIN_NUM_PARAMS,
            "fsdp_backward_prefetch": "BACKWARD_PRE",
            "fsdp_forward_prefetch": False,
            "fsdp_offload_params": False,
            "fsdp_state_dict_type": "FULL_STATE_DICT",
            "fsdp_sync_module_states": True,
            "fsdp_use_orig_params": True,  # the optimizer, EMA-free saving and LR groups see the model's own params
            "fsdp_cpu_ram_efficient_loading": False,
            "fsdp_activation_checkpointing": False,  # gradient_checkpointing is the model's own (diffusers)
        }
    return out


def write_accelerate_config(cfg: TrainConfig, run_dir: Path) -> Path | None:
    """Write <run_dir>/accelerate.yaml when the run needs one (DeepSpeed, FSDP); return its path."""
    if not needs_config_file(cfg):
        return None
    from trainers.core.fsio import atomic_write_text

    path = Path(run_dir) / ACCELERATE_CONFIG
    atomic_write_text(path, accelerate_config_text(cfg))
    return path


def accelerate_config_text(cfg: TrainConfig) -> str:
    import yaml

    header = f"# accelerate config of this run (distributed_backend = {cfg.distributed_backend}); written by Atelier\n"
    return header + yaml.safe_dump(accelerate_config(cfg), sort_keys=True)


def check_launch(cfg: TrainConfig, accelerator: Any) -> None:
    """The processes were launched the way distributed_backend says (else DeepSpeed/FSDP would silently be DDP)."""
    from accelerate.utils import DistributedType

    from trainers.core.options import ConfigError, ConfigIssue

    launched = {DistributedType.DEEPSPEED: "deepspeed", DistributedType.FSDP: "fsdp"}.get(
        accelerator.distributed_type, "ddp")
    if launched == cfg.distributed_backend:
        return
    if cfg.distributed_backend != "ddp":
        how = ("launch with `accelerate launch --config_file accelerate.yaml ...`, the file written by "
               "`python -m trainers accelerate-config --config <config.toml>` (the GUI writes it into the run folder)")
    else:
        how = f"set distributed_backend = {launched!r}, or launch without the {launched} accelerate config"
    raise ConfigError([ConfigIssue("distributed_backend", f"is {cfg.distributed_backend!r} but the processes were "
                                   f"launched for {launched!r}: {how}", "launch")])


def accelerator_handlers(cfg: TrainConfig) -> list[Any]:
    """accelerate kwargs handlers: the collective timeout, and DDP's buckets (no unused-parameter search)."""
    from accelerate.utils import DistributedDataParallelKwargs, InitProcessGroupKwargs

    ddp = DistributedDataParallelKwargs(bucket_cap_mb=BUCKET_CAP_MB, gradient_as_bucket_view=True,
                                        static_graph=cfg.gradient_checkpointing, find_unused_parameters=False)
    timeout = InitProcessGroupKwargs(timeout=timedelta(minutes=cfg.ddp_timeout))
    return [ddp, timeout]


def install_rank_timer(accelerator: Any, precision: str) -> "RankTimer":
    """A RankTimer whose comm hook (timing + all-reduce in `precision`) goes on every DDP model prepare() makes.

    accelerate keeps the unwrapped model, so the hook is registered where the DDP wrapper is made:
    in this accelerator's prepare_model, before any backward, as DDP requires.
    """
    from torch.nn.parallel import DistributedDataParallel

    timer = RankTimer(precision)
    prepare_model = accelerator.prepare_model

    def prepare_with_hook(model: Any, *args: Any, **kwargs: Any) -> Any:
        prepared = prepare_model(model, *args, **kwargs)
        if isinstance(prepared, DistributedDataParallel) and not timer.ddp:
            prepared.register_comm_hook(state=timer, hook=RankTimer.hook)
            timer.ddp = True
        if not getattr(prepared, "_atelier_timed", False):
            prepared.register_forward_pre_hook(timer.forward_started)
            prepared._atelier_timed = True
        return prepared

    accelerator.prepare_model = prepare_with_hook
    return timer


class RankTimer:
    """This rank's own work per optimizer step, without the time spent waiting for the other ranks.

    The wall time of a step is the same on every rank (each all-reduce waits for the slowest), so a
    slow rank shows only in its own share: the wait for its batches plus the time from the step's
    first forward until its last gradient bucket is handed to the all-reduce (the comm hook notes
    that moment; DDP's forward has no collective, we broadcast no buffers). Without DDP (one
    process, DeepSpeed, FSDP) the step's wall time stands in.
    """

    def __init__(self, precision: str = "fp32") -> None:
        self.precision = precision
        self.mark = time.perf_counter()
        self.started: float | None = None  # first forward of this step
        self.ready: float | None = None  # last gradient bucket of this step handed to the all-reduce
        self.buckets = 0  # gradient buckets reduced since the last step
        self.ddp = False  # the hook is registered (else step wall times stand in)

    def restart(self) -> None:
        self.mark, self.started, self.ready = time.perf_counter(), None, None

    def forward_started(self, *_: Any) -> None:
        if self.started is None:
            self.started = time.perf_counter()

    def step_done(self, data_wait_s: float = 0.0) -> float:
        """Seconds of this rank's own work on the step just finished; starts timing the next."""
        now = time.perf_counter()
        if self.ddp and self.started is not None and self.ready is not None:
            own = self.ready - self.started + data_wait_s
        else:
            own = now - self.mark
        self.mark, self.started, self.ready = now, None, None
        return max(own, 0.0)

    @staticmethod
    def hook(state, bucket):  # noqa: ANN001, ANN205 - DDP checks annotations; postponed ones are strings
        """The comm hook: note the moment, then all-reduce the bucket (compressed to bf16/fp16 if asked)."""
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

        state.ready = time.perf_counter()
        state.buckets += 1
        if state.precision == "bf16":
            return default_hooks.bf16_compress_hook(None, bucket)
        if state.precision == "fp16":
            return default_hooks.fp16_compress_hook(None, bucket)
        return default_hooks.allreduce_hook(None, bucket)


class StragglerCheck:
    """Every `every` steps, one all_gather of each rank's mean step time; names a rank that lags."""

    def __init__(self, accelerator: Any, every: int = STRAGGLER_EVERY, ratio: float = STRAGGLER_RATIO) -> None:
        self.accelerator, self.every, self.ratio = accelerator, every, ratio
        self.times: list[float] = []
        self.warned: set[int] = set()

    def add(self, step: int, seconds: float) -> tuple[list[float] | None, str | None]:
        """Record this rank's step time; at every `every`-th step return (mean per rank, warning or None)."""
        self.times.append(seconds)
        if self.accelerator.num_processes < 2 or step % self.every:
            return None, None
        import torch

        mine = torch.tensor([sum(self.times) / len(self.times)], dtype=torch.float64, device=self.accelerator.device)
        self.times.clear()
        per_rank = [float(t) for t in self.accelerator.gather(mine).cpu()]
        return per_rank, self.judge(per_rank)

    def judge(self, per_rank: list[float]) -> str | None:
        slow = max(range(len(per_rank)), key=per_rank.__getitem__)
        median = statistics.median(t for r, t in enumerate(per_rank) if r != slow)
        if median <= 0 or per_rank[slow] <= self.ratio * median or slow in self.warned:
            return None
        self.warned.add(slow)
        return (f"rank {slow} is {per_rank[slow] / median - 1:.0%} slower than the others "
                f"({per_rank[slow]:.3f} s vs {median:.3f} s of its own work a step); every step waits for it: "
                "check that GPU's clocks, temperature and other jobs, or its data loading")


def injected_failure(step: int) -> None:
    """Tests only: ATELIER_FAIL_RANK_AT_STEP="RANK:STEP" makes that rank fail at that step."""
    spec = os.environ.get(FAIL_ENV)
    if not spec:
        return
    rank, _, at = spec.partition(":")
    if int(os.environ.get("RANK", "0")) == int(rank) and step == int(at):
        raise RuntimeError(f"injected failure on rank {rank} at step {step} ({FAIL_ENV})")


class CollectiveCounter:
    """Tests only (ATELIER_COUNT_COLLECTIVES=1): counts torch.distributed collective calls, DDP's buckets included
    (they go through our Python comm hook, which calls torch.distributed.all_reduce)."""

    NAMES = ("all_reduce", "broadcast", "all_gather", "all_gather_into_tensor", "reduce_scatter",
             "reduce_scatter_tensor", "barrier", "all_gather_object", "broadcast_object_list", "gather", "scatter",
             "all_to_all", "reduce")

    def __init__(self) -> None:
        self.count = 0
        self._depth = 0

    def install(self) -> None:
        import torch.distributed as dist

        for name in self.NAMES:
            original = getattr(dist, name, None)
            if original is not None:
                setattr(dist, name, self._wrap(original))

    def _wrap(self, original: Any) -> Any:
        def counted(*args: Any, **kwargs: Any) -> Any:
            outer = self._depth == 0  # broadcast_object_list calls broadcast: count the outer call once
            self.count += outer
            self._depth += 1
            try:
                return original(*args, **kwargs)
            finally:
                self._depth -= 1

        return counted

    def take(self) -> int:
        count, self.count = self.count, 0
        return count


COUNTER: CollectiveCounter | None = None


def maybe_count_collectives() -> CollectiveCounter | None:
    global COUNTER
    if COUNTER is None and os.environ.get(COUNT_ENV) == "1":
        COUNTER = CollectiveCounter()
        COUNTER.install()
    return COUNTER


@contextlib.contextmanager
def full_weights(accelerator: Any) -> Iterator[None]:
    """Every rank enters; inside, rank 0's model modules hold whole weights (FSDP gathers them).

    DDP and DeepSpeed ZeRO 1/2 keep whole weights on every rank already: nothing to do.
    """
    from accelerate.utils import DistributedType

    if accelerator.distributed_type != DistributedType.FSDP:
        yield
        return
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

    with contextlib.ExitStack() as stack:
        for model in accelerator._models:
            stack.enter_context(FSDP.summon_full_params(model, writeback=False, rank0_only=True,
                                                        offload_to_cpu=True))
        yield
