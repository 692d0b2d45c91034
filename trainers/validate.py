"""Every check of a config before anything heavy starts: its options, its dataset options, its method's rules and
what its model's files allow (trainers/models/checks.py).

Torch-free: the GUI's Validate, --print-config and the trainer's start-up run the same checks. (The dataset's
files are read by the preflight, trainers/data/preflight.py.)
"""
from __future__ import annotations

from trainers.core.errors import ConfigError, ConfigIssue
from trainers.core.options import TrainConfig
from trainers.core.options.loss_checks import loss_issues
from trainers.core.options.optimizer_checks import optimizer_issues
from trainers.core.options.validation import existing_outputs, option_issues
from trainers.data.checks import dataset_issues
from trainers.data.edit_pairs import sizing_refusals, takes_controls
from trainers.methods import rules_for
from trainers.models.checks import model_issues


def validate(cfg: TrainConfig, check_paths: bool = True) -> list[ConfigIssue]:
    """Every problem of `cfg`; an empty list means it can start."""
    rules = rules_for(cfg.method)
    edit_model = bool(takes_controls(cfg.values))  # its control images may be in conditioning_data_dir
    issues = (option_issues(cfg, check_paths) + optimizer_issues(cfg) + loss_issues(cfg, edit_model)
              + rules.issues(cfg) + dataset_issues(cfg) + sizing_refusals(cfg.values))
    if check_paths:  # the disk: outputs a run would overwrite, and the model's files
        issues += existing_outputs(cfg, rules.outputs(cfg)) + model_issues(cfg.values)
    return issues


def check(cfg: TrainConfig, check_paths: bool = True) -> None:
    """Raise ConfigError listing every problem."""
    issues = validate(cfg, check_paths)
    if issues:
        raise ConfigError(issues)
