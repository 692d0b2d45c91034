"""Checks of the optimizer and learning-rate schedule options (torch-free: the GUI's Validate runs them)."""
from __future__ import annotations

from trainers.core.errors import ConfigIssue
from trainers.core.options.loading import TrainConfig


def optimizer_issues(cfg: TrainConfig) -> list[ConfigIssue]:
    return []
