"""Checks of the optimizer and learning-rate schedule options (torch-free: the GUI's Validate runs them).

Errors where sd-scripts would fail (an argument the optimizer or schedule does not take, a bad value, a warmup
on a schedule without one); warnings where it silently ignores a setting or only advises.
"""
from __future__ import annotations

import difflib
from typing import Any

from trainers.core.errors import ConfigIssue
from trainers.core.optimizers import (
    BUILT_IN,
    CLASS_PATH,
    RESERVED,
    TORCH_OPTIMIZERS,
    OptimizerSpec,
    parse_args,
    spec_for,
    text_encoder_rates,
)
from trainers.core.options.loading import TrainConfig
from trainers.core.schedules import SCHEDULER_ARGS, adafactor_relative_step, schedule_kind

GROUP = "optimizer"


def optimizer_issues(cfg: TrainConfig) -> list[ConfigIssue]:
    """Every problem of optimizer_type, optimizer_args and the lr_scheduler options."""
    issues = _type_issues(cfg) + _args_issues(cfg) + _schedule_issues(cfg)
    return [ConfigIssue(name, message, GROUP) for name, message in issues]


def optimizer_warnings(cfg: TrainConfig) -> list[str]:
    """Settings that have no effect with this optimizer or schedule, and sd-scripts' advice for it."""
    spec, kind = spec_for(cfg.optimizer_type), schedule_kind(cfg)
    kwargs, _ = parse_args(cfg.optimizer_args)
    out = []
    if spec is not None and spec.adaptive:
        if cfg.learning_rate <= 0.1:
            out.append(f"learning_rate {cfg.learning_rate:g} is low for {spec.name}: D-Adaptation and Prodigy "
                       "scale it by the step size they find; set it around 1.0")
        rates = {r for r in (cfg.unet_lr, *text_encoder_rates(cfg)) if r} | {cfg.learning_rate}
        if len(rates) > 1:
            out.append(f"{spec.name} adapts one learning rate for all weights: if the UNet and the text encoder "
                       "train with different rates (unet_lr, text_encoder_lr), it stops at the first step")
    if adafactor_relative_step(cfg):
        out += _relative_step_warnings(cfg, kwargs)
    elif spec is not None and spec.name == "Adafactor":  # sd-scripts' advice for a fixed learning rate
        if cfg.max_grad_norm:
            out.append("Adafactor clips its updates itself; consider max_grad_norm = 0")
        if cfg.lr_scheduler != "constant_with_warmup":
            out.append("Adafactor with a fixed learning rate works well with lr_scheduler = 'constant_with_warmup'")
        if kwargs.get("clip_threshold", 1.0) != 1.0:
            out.append("Adafactor works well with optimizer_args clip_threshold=1.0")
    if kind == "schedule_free" and (cfg.lr_scheduler != "constant" or cfg.lr_warmup_steps):
        out.append(f"{cfg.optimizer_type} schedules itself: lr_scheduler {cfg.lr_scheduler!r} and lr_warmup_steps "
                   "are not used (warm up with optimizer_args warmup_steps=N)")
    if kind == "piecewise_constant" and cfg.lr_warmup_steps:
        out.append("piecewise_constant has no warmup: lr_warmup_steps is not used (put it in step_rules)")
    for name, used_by in (("lr_decay_steps", "warmup_stable_decay"), ("lr_scheduler_timescale", "inverse_sqrt")):
        if cfg.values[name] and kind != used_by:
            out.append(f"{name} is only used by lr_scheduler = '{used_by}'")
    return out


def _relative_step_warnings(cfg: TrainConfig, kwargs: dict[str, Any]) -> list[str]:
    out = []
    if not kwargs.get("relative_step", True):
        out.append("Adafactor: warmup_init=True turns relative_step on (as in sd-scripts)")
    out.append(f"Adafactor with relative_step (its default) finds its own learning rate: learning_rate "
               f"{cfg.learning_rate:g} is only the rate shown before the first step"
               + (f", and lr_scheduler {cfg.lr_scheduler!r} is replaced by 'adafactor'"
                  if cfg.lr_scheduler != "adafactor" else "")
               + "; for a fixed rate give optimizer_args relative_step=False scale_parameter=False "
               "warmup_init=False")
    if cfg.unet_lr is not None or cfg.text_encoder_lr is not None:
        out.append("Adafactor with relative_step ignores unet_lr and text_encoder_lr")
    return out


def _type_issues(cfg: TrainConfig) -> list[tuple[str, str]]:
    name = cfg.optimizer_type
    if spec_for(name) is not None or "." in name:
        return [] if spec_for(name) is not None or CLASS_PATH.fullmatch(name) else [
            ("optimizer_type", f"{name!r} is not a module.Class path such as 'torch.optim.RMSprop'")]
    if name in TORCH_OPTIMIZERS:
        return []
    guess = difflib.get_close_matches(name, list(BUILT_IN) + list(TORCH_OPTIMIZERS), n=1, cutoff=0.6)
    cased = [t for t in TORCH_OPTIMIZERS if t.lower() == name.lower()]
    hint = (f"; torch.optim names are case-sensitive: {cased[0]!r}" if cased
            else f"; did you mean {guess[0]!r}?" if guess else "")
    return [("optimizer_type", f"{name!r} is neither a built-in optimizer nor a torch.optim class{hint} (or give "
             "a module.Class path such as 'torch.optim.RMSprop')")]


def _args_issues(cfg: TrainConfig) -> list[tuple[str, str]]:
    """Each optimizer_args entry against what the optimizer takes (malformed entries: see option_issues)."""
    spec = spec_for(cfg.optimizer_type)
    kwargs, _ = parse_args(cfg.optimizer_args)
    issues = []
    for key, value in kwargs.items():
        shown = f"{key}={value!r}"
        if key in RESERVED:
            issues.append(("optimizer_args", f"{shown}: '{key}' is set by the trainer; {RESERVED[key]}"))
        elif spec is not None:
            problem = _spec_problem(spec, key, value)
            if problem:
                issues.append(("optimizer_args", f"{shown}: {problem}"))
    if adafactor_relative_step(cfg) and cfg.lr_warmup_steps:
        issues.append(("lr_warmup_steps", "Adafactor with relative_step (its default) warms up by itself "
                       "(optimizer_args warmup_init=True) and takes no lr_warmup_steps: set it to 0, or give "
                       "optimizer_args relative_step=False to use lr_scheduler and warmup"))
    return issues


def _spec_problem(spec: OptimizerSpec, key: str, value: Any) -> str | None:
    where = f"{spec.name} ({spec.target})"
    if key in spec.fixed:
        return (f"{where} always runs with {key}={spec.fixed[key]!r}; for plain SGD choose optimizer_type "
                "'torch.optim.SGD'")
    if key not in spec.args:
        guess = difflib.get_close_matches(key, list(spec.args), n=1, cutoff=0.6)
        hint = f" (did you mean '{guess[0]}'?)" if guess else ""
        return f"{where} has no argument '{key}'{hint}; it accepts: {', '.join(sorted(spec.args))}"
    rule = spec.args[key]
    return None if rule.ok(value) else f"{spec.name}'s {key} must be {rule.expects}"


def _schedule_issues(cfg: TrainConfig) -> list[tuple[str, str]]:
    kind = schedule_kind(cfg)
    kwargs, malformed = parse_args(cfg.lr_scheduler_args)
    issues = [("lr_scheduler_args", f"{entry!r} is not key=value, e.g. num_cycles=0.5") for entry in malformed]
    decay = cfg.lr_decay_steps
    if decay >= 1 and not float(decay).is_integer():
        issues.append(("lr_decay_steps", f"got {decay}; use a whole number of steps, or a fraction below 1"))
    if cfg.lr_scheduler == "adafactor" and kind != "schedule_free" and not adafactor_relative_step(cfg):
        issues.append(("lr_scheduler", "'adafactor' is Adafactor's own schedule (relative_step): it needs "
                       "optimizer_type = 'Adafactor' without relative_step=False; choose another lr_scheduler"))
    if kind == "custom":
        return issues + _custom_schedule_issues(cfg)
    if kind in ("schedule_free", "adafactor"):
        return issues  # no schedule of ours runs (see optimizer_warnings), or the one above
    rules = SCHEDULER_ARGS[kind]
    for key, value in kwargs.items():
        if key not in rules:
            accepts = f"it accepts: {', '.join(sorted(rules))}" if rules else "it takes none"
            issues.append(("lr_scheduler_args", f"{key}={value!r}: the {kind!r} schedule has no argument '{key}'; "
                           f"{accepts}"))
        elif not rules[key].ok(value):
            issues.append(("lr_scheduler_args", f"{key}={value!r}: {kind}'s {key} must be {rules[key].expects}"))
    return issues + _shape_issues(cfg, kind, kwargs)


def _custom_schedule_issues(cfg: TrainConfig) -> list[tuple[str, str]]:
    issues = []
    if not CLASS_PATH.fullmatch(cfg.lr_scheduler_type.strip()):
        issues.append(("lr_scheduler_type", f"{cfg.lr_scheduler_type!r} is not a class name or a module.Class path "
                       "such as 'torch.optim.lr_scheduler.CosineAnnealingLR'"))
    if cfg.lr_warmup_steps:
        issues.append(("lr_warmup_steps", f"lr_scheduler_type {cfg.lr_scheduler_type!r} takes no warmup (as in "
                       "sd-scripts): set lr_warmup_steps = 0"))
    return issues


def _shape_issues(cfg: TrainConfig, kind: str, kwargs: dict[str, Any]) -> list[tuple[str, str]]:
    """Settings a schedule needs, or that do not fit together."""
    issues = []
    if kind == "cosine_with_min_lr":
        ratio, min_lr = cfg.lr_scheduler_min_lr_ratio, kwargs.get("min_lr")
        if ratio is None and min_lr is None:
            issues.append(("lr_scheduler_min_lr_ratio", "cosine_with_min_lr needs the lowest learning rate: set "
                           "lr_scheduler_min_lr_ratio (e.g. 0.1) or lr_scheduler_args min_lr=..."))
        elif ratio is not None and min_lr is not None:
            issues.append(("lr_scheduler_args", "min_lr and lr_scheduler_min_lr_ratio both set the lowest learning "
                           "rate of cosine_with_min_lr: keep one"))
    if kind == "polynomial":
        lr_end = kwargs.get("lr_end", 1e-7)
        if isinstance(lr_end, (int, float)) and not cfg.learning_rate > lr_end:
            issues.append(("learning_rate", f"is {cfg.learning_rate:g}, but the polynomial schedule decays to lr_end "
                           f"= {lr_end:g}: the learning rate must be above it (or lower lr_scheduler_args lr_end)"))
    if kind == "piecewise_constant" and "step_rules" not in kwargs:
        issues.append(("lr_scheduler_args", "piecewise_constant needs step_rules, e.g. step_rules=1:10,0.1:20,0.01 "
                       "(multiplier 1 for the first 10 steps, 0.1 until step 20, then 0.01)"))
    if kind == "warmup_stable_decay" and 0 < cfg.lr_warmup_steps < 1 and 0 < cfg.lr_decay_steps < 1 \
            and cfg.lr_warmup_steps + cfg.lr_decay_steps > 1:
        issues.append(("lr_decay_steps", f"the warmup ({cfg.lr_warmup_steps:g}) and decay ({cfg.lr_decay_steps:g}) "
                       "shares add up to more than all steps: lower them"))
    return issues
