"""Learning-rate schedules as pure Python: the GUI's preview and the trainer's LambdaLR use the same functions.

Each schedule is the multiplier of the base learning rate after `step` scheduler steps, exactly as the
transformers / diffusers function sd-scripts' `get_scheduler_fix` picks for the name (tests step those in torch
and compare). Step counts (lr_warmup_steps, lr_decay_steps, lr_scheduler_timescale) are whole numbers of
steps of a one-process run, or fractions of all steps below 1 (see `step_count`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from trainers.core.optimizers import Rule, choice, is_schedule_free, number, parse_args, spec_for

SCHEDULERS: tuple[str, ...] = (
    "constant", "constant_with_warmup", "linear", "cosine", "cosine_with_restarts", "polynomial",
    "cosine_with_min_lr", "warmup_stable_decay", "inverse_sqrt", "piecewise_constant", "adafactor")
# The library function sd-scripts builds each schedule with, and the keywords it passes itself.
LIBRARY: dict[str, tuple[str, frozenset[str]]] = {
    "constant": ("transformers.optimization.get_constant_schedule", frozenset()),
    "constant_with_warmup": ("transformers.optimization.get_constant_schedule_with_warmup",
                             frozenset({"num_warmup_steps"})),
    "linear": ("transformers.optimization.get_linear_schedule_with_warmup",
               frozenset({"num_warmup_steps", "num_training_steps"})),
    "cosine": ("transformers.optimization.get_cosine_schedule_with_warmup",
               frozenset({"num_warmup_steps", "num_training_steps"})),
    "cosine_with_restarts": ("transformers.optimization.get_cosine_with_hard_restarts_schedule_with_warmup",
                             frozenset({"num_warmup_steps", "num_training_steps", "num_cycles"})),
    "polynomial": ("transformers.optimization.get_polynomial_decay_schedule_with_warmup",
                   frozenset({"num_warmup_steps", "num_training_steps", "power"})),
    "cosine_with_min_lr": ("transformers.optimization.get_cosine_with_min_lr_schedule_with_warmup",
                           frozenset({"num_warmup_steps", "num_training_steps", "num_cycles", "min_lr_rate"})),
    "warmup_stable_decay": ("transformers.optimization.get_wsd_schedule",
                            frozenset({"num_warmup_steps", "num_stable_steps", "num_decay_steps", "num_cycles",
                                       "min_lr_ratio", "num_training_steps"})),  # the last: stable steps win
    "inverse_sqrt": ("transformers.optimization.get_inverse_sqrt_schedule",
                     frozenset({"num_warmup_steps", "timescale"})),
    "piecewise_constant": ("diffusers.optimization.get_piecewise_constant_schedule", frozenset()),
}
_SHAPES = choice("linear", "cosine", "1-sqrt")
# What lr_scheduler_args may set for each schedule (the library function's other keywords but last_epoch).
SCHEDULER_ARGS: dict[str, dict[str, Rule]] = {
    "constant": {}, "constant_with_warmup": {}, "linear": {}, "cosine_with_restarts": {}, "inverse_sqrt": {},
    "adafactor": {},
    "cosine": {"num_cycles": number(0, lo_open=True, example="0.5 (a half cosine, the default)")},
    "polynomial": {"lr_end": number(0, example="1e-7 (the default)")},
    "cosine_with_min_lr": {"min_lr": number(0, example="1e-6")},
    "warmup_stable_decay": {"warmup_type": _SHAPES, "decay_type": _SHAPES},
    "piecewise_constant": {"step_rules": Rule("rules like '1:10,0.1:20,0.01' (multiplier 1 for the first 10 "
                                              "steps, 0.1 until step 20, then 0.01)", lambda v: _rules_ok(v))},
}


def _rules_ok(text: Any) -> bool:
    try:
        _step_rules(text)
    except (ValueError, TypeError, AttributeError):
        return False
    return True


def _step_rules(text: str) -> tuple[dict[int, float], float]:
    """diffusers' step_rules: 'value:steps,...,last_value'."""
    parts = text.split(",")
    rules = {}
    for part in parts[:-1]:
        value, steps = part.split(":")
        rules[int(steps)] = float(value)
    return rules, float(parts[-1])


def adafactor_relative_step(cfg: Any) -> bool:
    """Adafactor finding its own step size (sd-scripts' default; warmup_init forces it too)."""
    spec = spec_for(cfg.optimizer_type)
    if spec is None or spec.name != "Adafactor":
        return False
    kwargs, _ = parse_args(cfg.optimizer_args)
    return bool(kwargs.get("relative_step", True)) or bool(kwargs.get("warmup_init", False))


def schedule_kind(cfg: Any) -> str:
    """What really schedules the learning rate, in sd-scripts' order of precedence: 'schedule_free' (no
    scheduler), 'custom' (lr_scheduler_type), 'adafactor' (Adafactor's relative step) or cfg.lr_scheduler."""
    if is_schedule_free(cfg.optimizer_type):
        return "schedule_free"
    if cfg.lr_scheduler_type.strip():
        return "custom"
    if adafactor_relative_step(cfg):
        return "adafactor"
    return cfg.lr_scheduler


def preview_blocker(cfg: Any) -> str | None:
    """Why the learning rate over the steps cannot be computed ahead of the run, or None."""
    kind = schedule_kind(cfg)
    if kind == "custom":
        return f"the learning rate follows lr_scheduler_type {cfg.lr_scheduler_type!r}, which cannot be previewed"
    if kind == "adafactor":
        return "Adafactor with relative_step finds its own learning rate as it trains; it cannot be previewed"
    return None


def step_count(value: float, cfg: Any, total_steps: int, num_processes: int = 1) -> int:
    """A step count option: below 1 a fraction of all steps; from 1 up a count of steps of a one-process run.

    When epochs set the length, P processes take 1/P of the steps, so a count takes 1/P of its steps too and
    ends at the same share of training. With max_train_steps or keep_global_batch the steps are the same on any P.
    """
    if 0 < value < 1:
        return int(round(value * total_steps))
    if cfg.max_train_epochs and not cfg.keep_global_batch and num_processes > 1:
        return min(total_steps, max(1, int(round(value / num_processes)))) if value else 0
    return int(value)


@dataclass(frozen=True)
class LrSchedule:
    """The multiplier of the base learning rates after `step` scheduler steps (LambdaLR's lr_lambda)."""

    name: str
    total: int
    warmup: int = 0
    decay: int = 0
    num_cycles: float = 1
    power: float = 1.0
    min_lr_ratio: float | None = None
    timescale: int | None = None
    lr_init: float = 1.0  # the optimizer's learning rate (polynomial's lr_end and min_lr are relative to it)
    args: dict[str, Any] = field(default_factory=dict)

    def __call__(self, step: int) -> float:
        if self.name in ("constant", "schedule_free"):
            return 1.0
        if self.name == "piecewise_constant":
            rules, last = _step_rules(self.args["step_rules"])
            return next((rules[s] for s in sorted(rules) if step < s), last)
        if self.name == "warmup_stable_decay":
            return self._wsd(step)
        if step < self.warmup:
            return float(step) / float(max(1, self.warmup))
        return getattr(self, "_" + self.name)(step)

    def _progress(self, step: int) -> float:
        return float(step - self.warmup) / float(max(1, self.total - self.warmup))

    def _constant_with_warmup(self, step: int) -> float:
        return 1.0

    def _linear(self, step: int) -> float:
        return max(0.0, float(self.total - step) / float(max(1, self.total - self.warmup)))

    def _cosine(self, step: int) -> float:
        cycles = self.args.get("num_cycles", 0.5)
        return max(0.0, 0.5 * (1.0 + math.cos(math.pi * float(cycles) * 2.0 * self._progress(step))))

    def _cosine_with_restarts(self, step: int) -> float:
        progress = self._progress(step)
        if progress >= 1.0:
            return 0.0
        return max(0.0, 0.5 * (1.0 + math.cos(math.pi * ((float(self.num_cycles) * progress) % 1.0))))

    def _polynomial(self, step: int) -> float:
        lr_end = self.args.get("lr_end", 1e-7)
        decay_steps = self.total - self.warmup
        if step > self.total or decay_steps <= 0:
            return lr_end / self.lr_init
        pct_remaining = 1 - (step - self.warmup) / decay_steps
        return ((self.lr_init - lr_end) * pct_remaining ** self.power + lr_end) / self.lr_init

    def _cosine_with_min_lr(self, step: int) -> float:
        rate = self.min_lr_ratio if self.min_lr_ratio is not None else self.args["min_lr"] / self.lr_init
        factor = 0.5 * (1.0 + math.cos(math.pi * float(self.num_cycles / 2) * 2.0 * self._progress(step)))
        return max(0, factor * (1 - rate) + rate)

    def _inverse_sqrt(self, step: int) -> float:
        timescale = self.timescale or self.warmup or 10_000
        return 1.0 / math.sqrt((step + timescale - self.warmup) / timescale)

    def _wsd(self, step: int) -> float:
        floor = self.min_lr_ratio or 0.0
        stable = self.total - self.warmup - self.decay
        if step < self.warmup:
            return max(0.0, _shape(self.args.get("warmup_type", "linear"), float(step) / float(max(1, self.warmup)),
                                   rising=True, cycles=0.5) * (1.0 - floor) + floor)
        if step < self.warmup + stable:
            return 1.0
        if step < self.warmup + stable + self.decay:
            progress = float(step - self.warmup - stable) / float(max(1, self.decay))
            return max(0.0, _shape(self.args.get("decay_type", "cosine"), progress, rising=False,
                                   cycles=self.num_cycles / 2) * (1.0 - floor) + floor)
        return floor


def _shape(kind: str, progress: float, rising: bool, cycles: float) -> float:
    if kind == "linear":
        return progress if rising else 1.0 - progress
    if kind == "cosine":
        if rising:
            return 0.5 * (1.0 - math.cos(math.pi * progress))
        return 0.5 * (1.0 + math.cos(math.pi * float(cycles) * 2.0 * progress))
    return 1.0 - math.sqrt(1.0 - progress) if rising else 1.0 - math.sqrt(progress)


def build_schedule(cfg: Any, total_steps: int, num_processes: int = 1, lr_init: float | None = None) -> LrSchedule:
    """The schedule of `cfg` for a run of `total_steps` optimizer steps on `num_processes` processes.

    ValueError (with the option to change) when the settings do not fit this length, or the schedule is one
    that only its library computes (see `preview_blocker`).
    """
    blocker = preview_blocker(cfg)
    if blocker:
        raise ValueError(blocker)
    kind = schedule_kind(cfg)
    args, _ = parse_args(cfg.lr_scheduler_args)
    warmup = step_count(cfg.lr_warmup_steps, cfg, total_steps, num_processes)
    decay = step_count(cfg.lr_decay_steps, cfg, total_steps, num_processes)
    timescale = cfg.lr_scheduler_timescale
    if timescale:
        timescale = max(1, step_count(timescale, cfg, total_steps, num_processes))
    if kind == "warmup_stable_decay" and warmup + decay > total_steps:
        raise ValueError(f"lr_warmup_steps ({warmup}) + lr_decay_steps ({decay}) are more than the run's "
                         f"{total_steps} steps: lower them (or use fractions below 1)")
    return LrSchedule(kind, total_steps, warmup=0 if kind == "schedule_free" else warmup, decay=decay,
                      num_cycles=cfg.lr_scheduler_num_cycles, power=cfg.lr_scheduler_power,
                      min_lr_ratio=cfg.lr_scheduler_min_lr_ratio, timescale=timescale,
                      lr_init=cfg.learning_rate if lr_init is None else lr_init, args=args)


def lr_curve(cfg: Any, total_steps: int, num_processes: int = 1, base_lr: float | None = None,
             max_points: int = 400) -> list[tuple[int, float]]:
    """(optimizer step, learning rate it trains with) from step 1 to `total_steps`, at most `max_points` of them
    (evenly spaced, the last included). `base_lr` defaults to learning_rate. ValueError as `build_schedule`."""
    schedule = build_schedule(cfg, total_steps, num_processes)
    base = cfg.learning_rate if base_lr is None else base_lr
    stride = max(1, math.ceil(total_steps / max_points))
    steps = list(range(1, total_steps + 1, stride))
    if steps and steps[-1] != total_steps:
        steps.append(total_steps)
    return [(s, base * schedule(s - 1)) for s in steps]  # step s trains with the rate after s - 1 scheduler steps
