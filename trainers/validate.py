"""Every check of a config before anything heavy starts: its options, its dataset options and its method's rules.

Torch-free: the GUI's Validate and the trainer's start-up run the same checks. (The dataset's files
are read by the preflight, trainers/data/preflight.py.)
"""
from __future__ import annotations

from trainers.core.errors import ConfigError, ConfigIssue
from trainers.core.options import TrainConfig
from trainers.core.options.loss_checks import loss_issues
from trainers.core.options.optimizer_checks import optimizer_issues
from trainers.core.options.validation import existing_outputs, option_issues
from trainers.data.checks import dataset_issues
from trainers.methods import rules_for


def validate(cfg: TrainConfig, check_paths: bool = True) -> list[ConfigIssue]:
    """Every problem of `cfg`; an empty list means it can start."""
    rules = rules_for(cfg.method)
    issues = (option_issues(cfg, check_paths) + optimizer_issues(cfg) + loss_issues(cfg) + rules.issues(cfg)
              + dataset_issues(cfg))
    if check_paths:
        issues += existing_outputs(cfg, rules.outputs(cfg))
    return issues


def check(cfg: TrainConfig, check_paths: bool = True) -> None:
    """Raise ConfigError listing every problem."""
    issues = validate(cfg, check_paths)
    if issues:
        raise ConfigError(issues)
