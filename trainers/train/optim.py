"""Optimizers and learning-rate schedules from the config, as sd-scripts' get_optimizer / get_scheduler_fix build them.

What each name builds and the arguments it takes are in trainers/core/optimizers.py; the schedules are the pure
functions of trainers/core/schedules.py under a LambdaLR, so the GUI's preview is what the run does.
"""
from __future__ import annotations

import contextlib
import importlib
import inspect
import os
import sys
from collections.abc import Callable, Iterator
from typing import Any

import torch

from trainers.core.errors import ConfigError, ConfigIssue
from trainers.core.optimizers import OptimizerSpec, class_path, is_schedule_free, parse_args, spec_for
from trainers.core.options import TrainConfig
from trainers.core.options.optimizer_checks import optimizer_warnings
from trainers.core.options.typed import OptimizerOptions
from trainers.core.schedules import build_schedule, schedule_kind, step_count

Warn = Callable[[str], None]


def _error(name: str, message: str) -> ConfigError:
    return ConfigError([ConfigIssue(name, message, "optimizer")])


def _print_warning(message: str) -> None:
    if os.environ.get("RANK", "0") == "0":
        print(f"warning: {message}", file=sys.stderr, flush=True)


def _import_class(path: str, default_module: str, option: str) -> Any:
    module_name, name = path.rpartition(".")[0] or default_module, path.rpartition(".")[2]
    try:
        module = importlib.import_module(module_name)
    except ImportError as err:
        raise _error(option, f"cannot import module {module_name!r} for {path!r} ({err}); install its package "
                     "in this environment or fix the path") from None
    found = getattr(module, name, None)
    if not callable(found):
        raise _error(option, f"{module_name!r} has no class {name!r}; check the spelling (names are case-sensitive)")
    return found


def optimizer_class(cfg: TrainConfig | OptimizerOptions) -> Any:
    """The class optimizer_type names (imported); a ConfigError naming optimizer_type if it cannot be."""
    opts = cfg if isinstance(cfg, OptimizerOptions) else OptimizerOptions.of(cfg)
    spec = spec_for(opts.optimizer_type)
    if spec is not None:
        return _import_class(spec.target, "", "optimizer_type")
    module, name = class_path(opts.optimizer_type)
    return _import_class(f"{module}.{name}", "torch.optim", "optimizer_type")


def _unknown_keywords(target: Any, keys: list[str], skip: int) -> list[str]:
    """Keywords `target` does not take (none when it takes **kwargs or has no readable signature)."""
    try:
        params = list(inspect.signature(target).parameters.values())[skip:]
    except (TypeError, ValueError):
        return []
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        return []
    names = {p.name for p in params}
    return [k for k in keys if k not in names]


def check_optimizer(cfg: TrainConfig) -> None:
    """Before any model loads: the optimizer and any lr_scheduler_type import, and a class path's optimizer_args /
    lr_scheduler_args name arguments they take. Raises ConfigError listing every problem."""
    issues: list[ConfigIssue] = []
    opts, kind = OptimizerOptions.of(cfg), schedule_kind(cfg)
    for check in (_check_optimizer_class, _check_scheduler_class):
        try:
            check(opts, kind)
        except ConfigError as err:
            issues += err.issues
    if issues:
        raise ConfigError(issues)


def _check_optimizer_class(opts: OptimizerOptions, schedule: str) -> None:
    cls = optimizer_class(opts)
    if spec_for(opts.optimizer_type) is None:
        kwargs, _ = parse_args(opts.optimizer_args)
        unknown = _unknown_keywords(cls, list(kwargs), skip=1)
        if unknown:
            raise _error("optimizer_args", f"{opts.optimizer_type} takes no argument(s) {', '.join(unknown)}")


def _check_scheduler_class(opts: OptimizerOptions, schedule: str) -> None:
    if schedule != "custom":
        return
    cls = _import_class(opts.lr_scheduler_type.strip(), "torch.optim.lr_scheduler", "lr_scheduler_type")
    kwargs, _ = parse_args(opts.lr_scheduler_args)
    unknown = _unknown_keywords(cls, list(kwargs), skip=1)
    if unknown:
        raise _error("lr_scheduler_args", f"{opts.lr_scheduler_type} takes no argument(s) {', '.join(unknown)}")


def build_optimizer(cfg: TrainConfig, param_groups: list[dict[str, Any]], warn: Warn | None = None
                    ) -> torch.optim.Optimizer:
    """The optimizer of `cfg` over `param_groups`, in train mode (schedule-free ones need it before a step).

    `warn` receives what sd-scripts would log as warnings (default: printed on stderr by rank 0).
    A ConfigError names the option when the class cannot be imported or refuses the arguments.
    """
    warn = warn or _print_warning
    for message in optimizer_warnings(cfg):
        warn(message)
    opts = OptimizerOptions.of(cfg)
    spec = spec_for(opts.optimizer_type)
    cls = optimizer_class(opts)
    kwargs, _ = parse_args(opts.optimizer_args)
    lr: float | None = opts.learning_rate
    groups = param_groups
    if spec is not None:
        kwargs = {**spec.defaults, **kwargs, **spec.fixed}
        lr, groups = _fit_to(spec, opts.learning_rate, kwargs, param_groups, warn)
    if "fused" not in kwargs and "foreach" not in kwargs:
        kwargs.update(kernel_choice(cls, groups, opts.fused_optimizer))
    try:
        optimizer = cls(groups, lr=lr, **kwargs)
    except (TypeError, ValueError, AssertionError) as err:
        shown = ", ".join(f"{k}={v!r}" for k, v in kwargs.items()) or "no optimizer_args"
        raise _error("optimizer_args", f"{opts.optimizer_type} refused its arguments ({shown}, learning rate "
                     f"{lr}): {err}") from None
    if callable(getattr(optimizer, "train", None)):
        optimizer.train()  # as sd-scripts: schedule-free optimizers start in train mode
    return optimizer


FUSED_CLASSES = (torch.optim.AdamW, torch.optim.Adam)


def fused_devices() -> set[str]:
    """Device types torch has fused Adam/AdamW kernels for (torch 2.13: cuda, cpu, mps, xpu, hpu, ...)."""
    try:
        from torch.optim.optimizer import _get_fused_kernels_supported_devices
    except ImportError:  # an older torch: CUDA only had them
        return {"cuda"}
    return set(_get_fused_kernels_supported_devices())


def fusable(cls: Any, groups: list[dict[str, Any]]) -> bool:
    """torch's Adam/AdamW take `fused=True` over floating-point tensors all of one device type it has the kernel for
    (torch's own check, _device_dtype_check_for_fused). On the CPU: 4.6x faster than the per-tensor loop over a
    LoRA's 144 tensors; equal to it within float rounding."""
    if cls not in FUSED_CLASSES:
        return False
    params = [p for g in groups for p in g["params"]]
    devices = {p.device.type for p in params}
    return (bool(params) and len(devices) == 1 and devices <= fused_devices()
            and all(p.is_floating_point() for p in params))


def kernel_choice(cls: Any, groups: list[dict[str, Any]], mode: str) -> dict[str, bool]:
    """The keyword fused_optimizer adds to Adam/AdamW: 'auto' fused=True where fusable, else torch's default
    (foreach on CUDA); 'on' fused=True or a ConfigError naming fused_optimizer; 'off' fused=False (torch's default
    loop). Other optimizers get nothing (with 'on': refused, so nobody believes they run fused)."""
    can = fusable(cls, groups)
    if mode == "on" and not can:
        devices = sorted({p.device.type for g in groups for p in g["params"]})
        what = (f"{getattr(cls, '__name__', cls)} has no fused kernel in torch" if cls not in FUSED_CLASSES else
                f"torch has no fused AdamW/Adam kernel for these weights (devices {devices}; fused kernels exist "
                f"for {sorted(fused_devices())}, floating-point weights on one device only)")
        raise _error("fused_optimizer", f"'on' asks for a fused update but {what}: set fused_optimizer = 'auto'")
    if cls not in FUSED_CLASSES:
        return {}
    if mode == "off":
        return {"fused": False}
    return {"fused": True} if can else {}


def _fit_to(spec: OptimizerSpec, learning_rate: float, kwargs: dict[str, Any], groups: list[dict[str, Any]],
            warn: Warn) -> tuple[float | None, list[dict[str, Any]]]:
    """The learning rate and parameter groups `spec` is built with; fills in sd-scripts' defaults in `kwargs`."""
    if spec.paged and not torch.cuda.is_available():
        warn(f"{spec.name} pages its state between GPU and CPU memory; without CUDA it runs unpaged")
    if spec.adaptive:
        rates = {g.get("lr", learning_rate) for g in groups} - {0, 0.0}
        if len(rates) > 1:
            raise _error("unet_lr", f"{spec.name} adapts one learning rate for every weight, but the parameter "
                         f"groups have {sorted(rates)}: set unet_lr and text_encoder_lr to the same value (or leave "
                         "them unset)")
    if spec.name == "Adafactor":
        if not kwargs["relative_step"] and kwargs.get("warmup_init", False):
            kwargs["relative_step"] = True
        if kwargs["relative_step"]:  # Adafactor finds its own step size: no lr, anywhere
            return None, [{k: v for k, v in g.items() if k != "lr"} for g in groups]
    return learning_rate, groups


def warmup_steps(cfg: TrainConfig, total_steps: int, num_processes: int = 1) -> int:
    """lr_warmup_steps below 1 is a fraction of all steps; from 1 up a count of one-process steps (see step_count)."""
    return step_count(OptimizerOptions.of(cfg).lr_warmup_steps, cfg, total_steps, num_processes)


def build_lr_scheduler(cfg: TrainConfig, optimizer: torch.optim.Optimizer, total_steps: int,
                       num_processes: int = 1) -> Any:
    """Stepped once per optimizer step, by us: the same share of training on any number of processes."""
    from torch.optim.lr_scheduler import LambdaLR

    kind = schedule_kind(cfg)
    opts = OptimizerOptions.of(cfg)
    if kind == "custom":
        return _custom_scheduler(opts, optimizer)
    if kind == "adafactor":
        from transformers.optimization import Adafactor, AdafactorSchedule

        if not isinstance(optimizer, Adafactor):
            raise _error("lr_scheduler", "'adafactor' is Adafactor's own schedule: choose optimizer_type 'Adafactor' "
                         "or another lr_scheduler")
        return AdafactorSchedule(optimizer, opts.learning_rate)
    lr_init = optimizer.defaults.get("lr")
    try:
        schedule = build_schedule(cfg, total_steps, num_processes,
                                  lr_init if isinstance(lr_init, (int, float)) and lr_init else None)
    except ValueError as err:
        raise _error("lr_scheduler", str(err)) from None
    return LambdaLR(optimizer, lambda step: schedule(step))  # a plain function: nothing of it goes into states


def _custom_scheduler(opts: OptimizerOptions, optimizer: torch.optim.Optimizer) -> Any:
    cls = _import_class(opts.lr_scheduler_type.strip(), "torch.optim.lr_scheduler", "lr_scheduler_type")
    kwargs, _ = parse_args(opts.lr_scheduler_args)
    try:
        return cls(optimizer, **kwargs)
    except (TypeError, ValueError) as err:
        raise _error("lr_scheduler_args", f"{opts.lr_scheduler_type} refused its arguments "
                     f"({', '.join(f'{k}={v!r}' for k, v in kwargs.items()) or 'none'}): {err}") from None


class OptimizerModes:
    """sd-scripts' get_optimizer_train_eval_fn: a schedule-free optimizer trains in train() mode and is sampled,
    saved and finished in eval() mode (its averaged weights). For every other optimizer both are no-ops."""

    def __init__(self, optimizer: Any, cfg: TrainConfig) -> None:
        self.optimizer = optimizer
        self.active = is_schedule_free(OptimizerOptions.of(cfg).optimizer_type) and callable(getattr(optimizer, "eval", None))
        self.training = True  # build_optimizer left it in train mode

    def train(self) -> None:
        """Before training steps (also after a resume: a state saved in eval mode comes back in eval mode)."""
        if self.active:
            self.optimizer.train()
        self.training = True

    def eval(self) -> None:
        if self.active:
            self.optimizer.eval()
        self.training = False

    @contextlib.contextmanager
    def evaluating(self) -> Iterator[None]:
        """Eval mode inside (a sample, a save); train mode again after, if it was on before."""
        was_training = self.training
        self.eval()
        try:
            yield
        finally:
            if was_training:
                self.train()

    def around(self, fn: Callable[..., Any] | None) -> Callable[..., Any] | None:
        """`fn` run in eval mode (None stays None: e.g. a run without sample prompts)."""
        if fn is None or not self.active:
            return fn

        def wrapped(*args: Any, **kwargs: Any) -> Any:
            with self.evaluating():
                return fn(*args, **kwargs)

        return wrapped
