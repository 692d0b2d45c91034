"""Options: Logging."""
from __future__ import annotations

from trainers.core.options.schema import Option

OPTIONS: tuple[Option, ...] = (
    Option("logging_dir", "str", "", "Write TensorBoard logs to this folder (empty: no TensorBoard).",
           "logging", path="out"),
)
