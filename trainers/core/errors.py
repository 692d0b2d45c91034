"""How runs end early, by cause. Torch-free: the GUI, config validation and every process share these.

`BadInput` is what the user can fix (a config value, a file, a dataset): exit code 2, never a
traceback. `TrainingFailed` is a known cause met during training (NaN loss, out of memory, a full
disk), with `details` for the error event. `TrainingStopped` is a stop on request, after saving.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

EXIT_BAD_INPUT = 2  # the exit code of a process that stopped on bad input (1: a failure; 0: done or stopped)


class BadInput(ValueError):
    """Something the user gave cannot be used; the message names it and says how to fix it."""


class ToolError(BadInput):
    """Bad input found while running (a file that is not what it must be): the message names the option and the fix."""

    def __init__(self, option: str, message: str) -> None:
        super().__init__(f"{option}: {message}")
        self.option = option


@dataclass
class ConfigIssue:
    """One problem with a config, tied to the option it concerns."""

    field: str
    message: str
    group: str = ""

    def __str__(self) -> str:
        return f"{self.field}: {self.message}"


@dataclass
class ConfigError(BadInput):
    """Raised with every problem found, so a user can fix them all at once."""

    issues: list[ConfigIssue] = field(default_factory=list)

    def __str__(self) -> str:
        return "\n".join(f"- {i}" for i in self.issues) if self.issues else "invalid config"


class TrainingStopped(Exception):
    """Raised after a requested stop (GUI Stop, SIGINT, SIGTERM) has saved; carries what was written."""

    def __init__(self, path: Path, state: Path | None = None, step: int = 0) -> None:
        saved = f"saved {path}" + (f" and the training state {state} (resume with resume = 'latest')" if state else "")
        super().__init__(f"stopped on request at step {step}; {saved}")
        self.path, self.state = path, state


class TrainingFailed(RuntimeError):
    """A run that cannot go on, with a short cause; `details` go into the error event (e.g. suggestions)."""

    kind = "training_failed"

    def __init__(self, message: str, **details: Any) -> None:
        super().__init__(message)
        self.details = details


class NonFiniteLoss(TrainingFailed):
    kind = "non_finite_loss"


class OutOfMemory(TrainingFailed):
    kind = "out_of_memory"


class DiskFull(TrainingFailed):
    kind = "disk_full"
