"""Every check of a config before anything heavy starts: its options, its dataset options, its method's rules and
what its model's files allow (trainers/models/checks.py).

Torch-free: the GUI's Validate, --print-config and the trainer's start (before torch loads: `check`, handed to the
run by trainers/__main__.py) run the same checks. (The dataset's files are read by the preflight report,
trainers/preflight/report.py.)
"""
from __future__ import annotations

import math
from pathlib import Path

from trainers.core.errors import ConfigError, ConfigIssue
from trainers.core.options import TrainConfig
from trainers.core.options.loss_checks import loss_issues
from trainers.core.options.optimizer_checks import optimizer_issues
from trainers.core.options.validation import existing_outputs, option_issues
from trainers.core.overwrites import overwrite_issue
from trainers.core.plan import StepPlan
from trainers.core.saves import Position, planned_saves, read_manifest, resolve_resume
from trainers.core.registry import method_spec
from trainers.data.checks import dataset_issues
from trainers.data.edit_pairs import sizing_refusals
from trainers.methods import rules_for
from trainers.models.checks import model_issues
from trainers.models.distilled import adapter_issues
from trainers.models.edit_rules import takes_controls


def validate(cfg: TrainConfig, check_paths: bool = True) -> list[ConfigIssue]:
    """Every problem of `cfg`; an empty list means it can start."""
    rules = rules_for(cfg.method)
    controls = takes_controls(cfg.values)
    edit_model = bool(controls)  # its control images may be in conditioning_data_dir
    issues = (option_issues(cfg, check_paths) + optimizer_issues(cfg) + loss_issues(cfg, edit_model)
              + rules.issues(cfg) + dataset_issues(cfg) + sizing_refusals(cfg.values, controls))
    if check_paths:  # the disk: outputs a run would overwrite, and the model's files
        trains = method_spec(cfg.method).trains
        issues += existing_outputs(cfg, rules.outputs(cfg)) + model_issues(cfg.values, trains=trains)
        issues += adapter_issues(cfg.values)
    return issues


def check(cfg: TrainConfig, check_paths: bool = True) -> None:
    """Raise ConfigError listing every problem."""
    issues = validate(cfg, check_paths)
    if issues:
        raise ConfigError(issues)


def method_outputs(cfg: TrainConfig) -> list[Path]:
    """Every path the final save of `cfg`'s method writes (its rules' `outputs`): what the run's saves are checked
    against (trainers/core/overwrites.py)."""
    return rules_for(cfg.method).outputs(cfg)


def planned_save_issues(cfg: TrainConfig, plan: StepPlan) -> list[ConfigIssue]:
    """Validate's side of `overwrite_issue`: the step and epoch saves of `plan`, after the training state that
    `resume` names; a fresh run wrote nothing yet, a resumed one may replace what its chain of runs wrote."""
    after, since = Position(), math.inf
    if cfg.resume.strip():
        try:
            manifest = read_manifest(resolve_resume(cfg.resume, cfg.output_dir, cfg.output_name))
        except ValueError:
            return []  # named by the check of resume
        after, since = Position.of_manifest(manifest), manifest.get("run_started")
    names = planned_saves(cfg.output_name, cfg.save_every_n_steps, cfg.save_every_n_epochs, plan, after)
    issue = overwrite_issue(cfg, method_outputs, names, since)
    return [issue] if issue else []
