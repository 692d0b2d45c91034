"""Several processes: DDP settings, the launch check, per-rank step timing and FSDP's whole weights.

(The accelerate launch command and per-run accelerate config are torch-free: trainers/core/launch.py.)

DDP: gradients are reduced in a few large buckets (`BUCKET_CAP_MB`) through one Python comm hook,
`RankTimer.hook` (registered in prepare() by `install_rank_timer`), which also notes when this
rank's gradients are ready (its own work, without waiting for the others), so a slow rank can be
named. `ddp_gradient_precision` picks plain all-reduce or torch's bf16/fp16 compression hooks.
"""
from __future__ import annotations

import contextlib
import importlib
import os
import statistics
import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

from trainers.core.options import TrainConfig
from trainers.core.options.typed import LaunchOptions, PrecisionOptions

BUCKET_CAP_MB = 100  # a LoRA's gradients fit in one or two buckets; a full SDXL UNet in ~100
STRAGGLER_EVERY = 20  # steps between comparisons of the ranks' step times (one small all_gather)
STRAGGLER_RATIO = 1.2  # a rank this much slower than the median of the others is reported


def check_launch(cfg: TrainConfig, accelerator: Any) -> None:
    """The processes were launched the way distributed_backend says (else DeepSpeed/FSDP would silently be DDP)."""
    from accelerate.utils import DistributedType

    from trainers.core.options import ConfigError, ConfigIssue

    launch = LaunchOptions.of(cfg)
    launched = {DistributedType.DEEPSPEED: "deepspeed", DistributedType.FSDP: "fsdp"}.get(
        accelerator.distributed_type, "ddp")
    if launched == launch.distributed_backend:
        plugin = getattr(accelerator.state, "fsdp_plugin", None) if launched == "fsdp" else None
        if plugin is not None and plugin.fsdp_version != launch.fsdp_version:
            raise ConfigError([ConfigIssue("fsdp_version", f"is {launch.fsdp_version} but the processes were launched "
                                           f"with FSDP{plugin.fsdp_version}: write the accelerate.yaml again (`python "
                                           "-m trainers accelerate-config --config <config.toml>`)", "launch")])
        return
    if launch.distributed_backend != "ddp":
        how = ("launch with `accelerate launch --config_file accelerate.yaml ...`, the file written by "
               "`python -m trainers accelerate-config --config <config.toml>` (the GUI writes it into the run folder)")
    else:
        how = f"set distributed_backend = {launched!r}, or launch without the {launched} accelerate config"
    raise ConfigError([ConfigIssue("distributed_backend", f"is {launch.distributed_backend!r} but the processes were "
                                   f"launched for {launched!r}: {how}", "launch")])


def on_cpu() -> bool:
    """The processes run on CPUs (ACCELERATE_USE_CPU, or no CUDA device): collectives go over gloo."""
    import torch

    return os.environ.get("ACCELERATE_USE_CPU", "").lower() in ("1", "true", "yes") or not torch.cuda.is_available()


def check_backend_device(cfg: TrainConfig) -> None:
    """FSDP1 needs NVIDIA GPUs; FSDP2 (torch's fully_shard) and DeepSpeed ZeRO 1/2 also shard CPU processes over
    gloo. ZeRO-3 is refused on CPUs: its parameter prefetch over gloo hung a 2-process run (ranks out of step)."""
    from trainers.core.options import ConfigError, ConfigIssue

    if not on_cpu():
        return
    launch = LaunchOptions.of(cfg)
    if launch.distributed_backend == "fsdp" and launch.fsdp_version == 1:
        raise ConfigError([ConfigIssue("distributed_backend", "'fsdp' with fsdp_version = 1 needs NVIDIA GPUs "
                                       "(accelerate runs CPU processes as plain DDP): set fsdp_version = 2, or "
                                       "choose 'ddp' or 'deepspeed'", "launch")])
    if launch.distributed_backend == "deepspeed" and launch.zero_stage == 3:
        raise ConfigError([ConfigIssue("zero_stage", "3 needs NVIDIA GPUs (on CPU processes its parameter "
                                       "prefetch over gloo hangs): use zero_stage = 2, or distributed_backend = "
                                       "'fsdp', which shards the weights too", "launch")])


def shard_cpu_processes(cfg: TrainConfig, accelerator: Any) -> None:
    """Turn FSDP2 or DeepSpeed on for CPU processes launched with the run's FSDP / DeepSpeed accelerate config.

    accelerate enables both for GPU processes only and runs CPU ones as plain DDP (MULTI_CPU), although torch's
    fully_shard and DeepSpeed (its CPU accelerator) shard over gloo just as well. The plugin is the one the launch
    describes (its FSDP_* / DeepSpeed environment), so the run trains and saves as the same launch does on GPUs.
    """
    from accelerate import PartialState
    from accelerate.utils import DistributedType

    launch = LaunchOptions.of(cfg)
    launched = {"fsdp": "ACCELERATE_USE_FSDP", "deepspeed": "ACCELERATE_USE_DEEPSPEED"}.get(launch.distributed_backend)
    if (launched is None or os.environ.get(launched, "false").lower() != "true"
            or accelerator.distributed_type != DistributedType.MULTI_CPU):
        return
    state = accelerator.state
    if launch.distributed_backend == "deepspeed":
        import deepspeed
        from accelerate.utils import DeepSpeedPlugin

        # On the CPU DeepSpeed would compile its shared-memory all-reduce op (C++: a minute on 2 cores at the first
        # run, and a compiler the machine may lack); it speeds up inference all-reduces only, so gloo's does here.
        comm = importlib.import_module("deepspeed.comm.torch")  # (its package names torch too)
        setattr(comm, "build_shm_op", lambda: None)
        deepspeed.init_distributed(dist_backend="gloo", auto_mpi_discovery=False)  # over torch's process group
        plugin = DeepSpeedPlugin()
        plugin.set_mixed_precision(accelerator.mixed_precision)
        plugin.select(_from_accelerator_state=True)
        state.distributed_type, state.deepspeed_plugins = DistributedType.DEEPSPEED, plugin
    else:
        from accelerate.utils import FullyShardedDataParallelPlugin

        plugin = FullyShardedDataParallelPlugin()
        if plugin.fsdp_version != 2 or launch.fsdp_version != 2:
            return  # check_launch names the mismatch
        if accelerator.mixed_precision != "no":
            plugin.set_mixed_precision(accelerator.mixed_precision)
        state.distributed_type, state.fsdp_plugin = DistributedType.FSDP, plugin
    PartialState._shared_state["distributed_type"] = state.distributed_type  # as accelerate does for GPU processes


_held_groups: list[Any] = []  # see hold_process_group


def hold_process_group() -> None:
    """Keep a Python reference to the default process group until `release_process_group`.

    A DDP model's reducer frees the group it holds with the GIL taken. If its reference is the last, the group's
    destructor waits for its gloo worker threads while one of them waits for the GIL (to free a finished
    broadcast's tensors): the process hangs after the run has ended (seen with 2 CPU processes on a busy machine;
    pytorch/pytorch#56297). Freed through Python's reference instead, the destructor runs with the GIL released.
    """
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized() and not _held_groups:
        _held_groups.append(dist.group.WORLD)


def release_process_group() -> None:
    """Free the held process group, after every model that used it (called when the run has ended)."""
    if _held_groups:
        import gc

        gc.collect()  # a DDP model caught in a reference cycle lets go of its reducer now, not at exit
        _held_groups.clear()


def accelerator_handlers(cfg: TrainConfig) -> list[Any]:
    """accelerate kwargs handlers: the collective timeout, and DDP's buckets (no unused-parameter search)."""
    from accelerate.utils import DistributedDataParallelKwargs, InitProcessGroupKwargs

    checkpointing = PrecisionOptions.of(cfg).gradient_checkpointing
    ddp = DistributedDataParallelKwargs(bucket_cap_mb=BUCKET_CAP_MB, gradient_as_bucket_view=True,
                                        static_graph=checkpointing, find_unused_parameters=False)
    timeout = InitProcessGroupKwargs(timeout=timedelta(minutes=LaunchOptions.of(cfg).ddp_timeout))
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
    def hook(state, bucket):  # type: ignore[no-untyped-def]  # DDP checks annotations; postponed ones are strings
        """The comm hook: note the moment, then all-reduce the bucket (compressed to bf16/fp16 if asked)."""
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

        group: Any = None  # the default process group
        state.ready = time.perf_counter()
        state.buckets += 1
        if state.precision == "bf16":
            return default_hooks.bf16_compress_hook(group, bucket)
        if state.precision == "fp16":
            return default_hooks.fp16_compress_hook(group, bucket)
        return default_hooks.allreduce_hook(group, bucket)


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


@contextlib.contextmanager
def full_weights(accelerator: Any) -> Iterator[None]:
    """Every rank enters; inside, rank 0's model modules hold (or answer state_dict() with) whole weights.

    DDP and DeepSpeed ZeRO 1/2 keep whole weights on every rank already: nothing to do. FSDP1 gathers them into
    the modules. FSDP2 and ZeRO-3 gather a whole state dict onto rank 0's CPU, and there every module's
    state_dict() answers with its part of it (their own state_dict gives shards), which is what the savers read.
    """
    from accelerate.utils import DistributedType

    kind = accelerator.distributed_type
    if kind == DistributedType.DEEPSPEED and _zero_stage(accelerator) == 3:
        with _whole_state_dicts(accelerator, lambda model: accelerator.get_state_dict(model, unwrap=False)):
            yield
        return
    if kind != DistributedType.FSDP:
        yield
        return
    if accelerator.is_fsdp2:
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

        whole = StateDictOptions(full_state_dict=True, cpu_offload=True)
        with _whole_state_dicts(accelerator, lambda model: get_model_state_dict(model, options=whole)):
            yield
        return
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

    with contextlib.ExitStack() as stack:
        for model in accelerator._models:
            stack.enter_context(FSDP.summon_full_params(model, writeback=False, rank0_only=True,
                                                        offload_to_cpu=True))
        yield


def _zero_stage(accelerator: Any) -> int:
    plugin = getattr(accelerator.state, "deepspeed_plugin", None)
    return int(plugin.zero_stage) if plugin is not None else 0


@contextlib.contextmanager
def _whole_state_dicts(accelerator: Any, gather: Any) -> Iterator[None]:
    """`gather(model)` on every rank (whole on rank 0). On rank 0 every module's state_dict() answers from it and
    its sharded parameters are whole ones meanwhile (savers that read weights directly, e.g. a LoRA's)."""
    import torch

    answering: list[Any] = []
    swapped: list[tuple[Any, str, Any]] = []  # (module, parameter name, the sharded parameter to put back)
    try:
        for model in accelerator._models:
            whole = gather(model)
            if not accelerator.is_main_process:
                continue
            for prefix, module in accelerator.unwrap_model(model).named_modules():
                module.state_dict = _part_of(whole, prefix)  # an instance attribute: the class's is back after
                answering.append(module)
                for name, param in list(module._parameters.items()):
                    key = f"{prefix}.{name}" if prefix else name
                    if param is not None and key in whole:
                        swapped.append((module, name, param))
                        module._parameters[name] = torch.nn.Parameter(whole[key], requires_grad=False)
        yield
    finally:
        for module, name, param in swapped:
            module._parameters[name] = param
        for module in answering:
            del module.state_dict


def _part_of(whole: dict[str, Any], prefix: str) -> Any:
    """A state_dict() that answers with the entries of `whole` under the module named `prefix`."""
    start = f"{prefix}." if prefix else ""

    def state_dict(*_: Any, **__: Any) -> dict[str, Any]:
        return {key[len(start):]: value for key, value in whole.items() if key.startswith(start)}

    return state_dict
