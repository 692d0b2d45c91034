"""Checks of the loss, noise and timestep options (torch-free: the GUI's Validate runs them)."""
from __future__ import annotations

from trainers.core.errors import ConfigIssue
from trainers.core.options.loading import TrainConfig


def loss_issues(cfg: TrainConfig) -> list[ConfigIssue]:
    return []
