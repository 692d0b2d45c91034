"""Validate for the page: every problem at once, each tied to its group, plus the dataset and step preview."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gui.allowed_paths import outside_roots
from gui.forms import ESSENTIALS
from gui.text import code_block, plain
from trainers.memory_estimate import memory_report
from trainers.core.optimizers import spec_for, text_encoder_rates
from trainers.core.options import BY_NAME, ConfigError, ConfigIssue, TrainConfig, config_from_dict
from trainers.core.options.optimizer_checks import optimizer_issues, optimizer_warnings
from trainers.core.plan import StepPlan
from trainers.core.schedules import lr_curve, preview_blocker, schedule_kind, step_count
from trainers.preflight.report import preflight


@dataclass
class CheckReport:
    cfg: TrainConfig | None
    issues: list[ConfigIssue] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    dataset_problem: str = ""  # what the dataset preflight found wrong (shown in the Dataset group)
    dataset_fields: list[tuple[str, str]] = field(default_factory=list)  # (option, first line) of those problems
    dataset: str = ""
    steps: str = ""
    lr_curve: dict[str, list[tuple[int, float]]] = field(default_factory=dict)  # series -> (step, lr)
    lr_note: str = ""  # what the chart shows, or why there is none
    memory: str = ""  # what the model's weights take in GPU memory

    @property
    def ok(self) -> bool:
        return self.cfg is not None and not self.issues and not self.dataset_problem

    def by_group(self) -> dict[str, list[str]]:
        """Problem lines keyed by where the page shows them (an essential field, a schema group, or "essentials")."""
        out: dict[str, list[str]] = {}
        for issue in self.issues:
            out.setdefault(_place(issue.field), []).append(f"**{plain(issue.field)}**: {plain(issue.message)}")
        if self.dataset_problem:
            out.setdefault("dataset", []).append(code_block(self.dataset_problem))
        for name, first_line in self.dataset_fields:  # a folder shown outside the Dataset group (train_data_dir)
            if _place(name) != "dataset":
                said = first_line.removeprefix(f"{name} = ").rstrip(":")
                out.setdefault(_place(name), []).append(f"**{plain(name)}**: {plain(said)} (the Dataset group says "
                                                        "how to fix it)")
        return out

    def summary(self) -> str:
        if not self.ok:
            lines = [f"- {plain(i)}" for i in self.issues] + (["- the dataset: see the Dataset group"]
                                                        if self.dataset_problem else [])
            head = f"### {len(lines)} problem(s) to fix\n" + "\n".join(lines)
        else:
            head = "### Ready to start"
        parts = [head]
        if self.warnings:
            parts.append("Warnings:\n" + "\n".join(f"- {plain(w)}" for w in self.warnings))
        if self.dataset:
            parts.append(f"**Dataset**\n{code_block(self.dataset)}")
        if self.steps:
            parts.append(f"**Steps** {self.steps}")
        if self.lr_note:
            parts.append(f"**Learning rate** {self.lr_note}")
        if self.memory:
            parts.append(f"**Memory** {plain(self.memory)}")
        return "\n\n".join(parts)


def _place(name: str) -> str:
    """Where the page shows a problem of option `name`: at its own field for the fields at the top (ESSENTIALS), in
    its group for the others, under the top fields ("essentials") for a name that is no option."""
    if name in ESSENTIALS:
        return name
    return BY_NAME[name].group if name in BY_NAME else "essentials"


def check_form(method: str, values: dict[str, Any], allowed_roots: list[Path] | None = None) -> CheckReport:
    """Everything Validate shows, every problem in one pass. `allowed_roots`: folders typed paths must lie under
    (None: anywhere).

    The dataset is read by the trainer's own preflight, so the page shows the buckets, skipped
    files and step count the run will really have.
    """
    warnings: list[str] = []
    cfg, unusable = form_config(method, values, warnings)
    if cfg is None:
        return CheckReport(None, unusable, warnings)
    outside = outside_roots(cfg, allowed_roots)
    # The rest is checked with what could not be used left out: values that are no option's (at their defaults)
    # and paths outside the roots (never looked into); each is named once, by its own issue.
    named = unusable + outside
    pre = preflight(cfg.replace(**{i.field: [] if BY_NAME[i.field].kind == "list" else "" for i in outside}))
    complete = not named
    report = CheckReport(cfg if complete else None, list(named), warnings + optimizer_warnings(cfg) + pre.warnings)
    named_fields = {issue.field for issue in named}
    for issue in pre.errors:
        if issue.field in named_fields:
            continue
        if issue.group == "dataset" and issue.field not in BY_NAME or "\n" in issue.message:
            report.dataset_problem += ("\n\n" if report.dataset_problem else "") + issue.message
            if issue.field in BY_NAME:
                report.dataset_fields.append((issue.field, issue.message.splitlines()[0]))
        else:
            report.issues.append(issue)
    if complete:  # the numbers of a config with some values left at their defaults would mislead
        estimate, too_big = memory_report(cfg)
        report.memory = estimate or pre.memory
        report.warnings += too_big
        if pre.subsets:
            report.dataset = pre.text(with_memory=False)  # shown as its own part
        if pre.plan is not None:
            report.steps = step_preview(pre.plan, pre.train_samples + pre.reg_samples)
            report.lr_curve, report.lr_note = lr_preview(cfg, pre.plan)
    return report


def form_config(method: str, values: dict[str, Any], warnings: list[str]) -> tuple[TrainConfig | None,
                                                                                  list[ConfigIssue]]:
    """(the config of the form's values, the problems of values no option takes). A value that is not valid (or a
    name that is no option) is named and left out, so the rest of the form is checked in the same pass; None
    when even that does not give a config."""
    try:
        return config_from_dict(method, values, warnings=warnings), []
    except ConfigError as err:
        unusable = err.issues
    fields = {issue.field for issue in unusable}
    try:
        return config_from_dict(method, {k: v for k, v in values.items() if k not in fields}), unusable
    except ConfigError as err:
        return None, unusable + [issue for issue in err.issues if issue not in unusable]


def lr_preview(cfg: TrainConfig, plan: StepPlan) -> tuple[dict[str, list[tuple[int, float]]], str]:
    """The learning rate at each step of the planned run (one series per distinct rate), and a line about it.

    The same pure functions the trainer's LambdaLR runs (trainers/core/schedules.py): the chart is the run.
    """
    blocker = preview_blocker(cfg)
    if blocker:
        return {}, f"not drawn: {plain(blocker)}."
    if optimizer_issues(cfg):
        return {}, "drawn once the optimizer and schedule options are fixed."
    try:
        curves = {name: lr_curve(cfg, plan.total_steps, plan.num_processes, rate)
                  for name, rate in distinct_rates(cfg).items()}
    except ValueError as err:
        return {}, f"not drawn: {plain(err)}."
    kind = schedule_kind(cfg)
    if kind == "schedule_free":
        return curves, f"{plain(cfg.optimizer_type)} has no schedule: constant (its own warmup_steps is not drawn)."
    warmup = step_count(cfg.lr_warmup_steps, cfg, plan.total_steps, plan.num_processes)
    text = f"`{kind}` over {plan.total_steps} steps" + (f", warming up for {warmup}" if warmup else "") + "."
    spec = spec_for(cfg.optimizer_type)
    if spec is not None and spec.adaptive:
        text += " D-Adaptation and Prodigy multiply it by the step size they find."
    return curves, text


def distinct_rates(cfg: TrainConfig) -> dict[str, float]:
    """The base learning rates of a run by series name: learning_rate, then unet_lr and each text encoder's rate
    where they differ from it (text_encoder_lr may give one rate per encoder)."""
    rates = {"learning_rate": cfg.learning_rate}
    if cfg.values.get("unet_lr") is not None:
        rates["unet_lr"] = float(cfg.values["unet_lr"])
    if cfg.values.get("text_encoder_lr") is not None:
        per_encoder = text_encoder_rates(cfg)
        if len(per_encoder) == 1:
            rates["text_encoder_lr"] = per_encoder[0]
        else:
            rates.update({f"text_encoder_lr (TE{i})": rate for i, rate in enumerate(per_encoder, 1)})
    return {name: rate for name, rate in rates.items() if name == "learning_rate" or rate != cfg.learning_rate}


def step_preview(plan: StepPlan, samples_per_epoch: int) -> str:
    """images x repeats x epochs / (per-device batch x processes x gradient accumulation) = steps, in words."""
    procs = f"{plan.num_processes} process{'es' if plan.num_processes != 1 else ''}"
    kept = " (train_batch_size, kept fixed by keep_global_batch)" if plan.keep_global_batch else ""
    return (f"{samples_per_epoch} samples per epoch (images x repeats) / (per-device batch "
            f"**{plan.per_device_batch}** x {procs} x accumulation {plan.gradient_accumulation_steps} = "
            f"global batch **{plan.global_batch}**{kept}) = **{plan.steps_per_epoch} steps per epoch**; "
            f"{plan.epochs} epoch(s) = **{plan.total_steps} steps** in total.")
