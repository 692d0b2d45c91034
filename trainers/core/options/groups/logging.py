"""Options: Logging, and how often the validation loss is computed."""
from __future__ import annotations

from trainers.core.options.schema import Option

OPTIONS: tuple[Option, ...] = (
    Option("logging_dir", "str", "", "Write TensorBoard logs to this folder, a subfolder per run named by its run id "
           "(empty: the run folder's logs/). The run panel's TensorBoard button opens them.", "logging", path="out"),
    Option("validate_every_n_steps", "int", None, "Compute the validation loss every N steps (needs "
           "validation_split).", "logging", min=1, nullable=True),
    Option("validate_every_n_epochs", "int", None, "Compute the validation loss every N epochs (unset: every epoch "
           "when there are validation images).", "logging", min=1, nullable=True),
    Option("max_validation_steps", "int", None, "At most this many validation batches each time (unset: all).",
           "logging", min=1, nullable=True, advanced=True),
)
