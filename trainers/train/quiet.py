"""Library chatter kept out of train.log and the page's log: notes that tell someone training nothing
(an optional CPU kernel package of bitsandbytes, torchvision fallbacks for image processors we never use,
an empty list of float32 modules, weight-loading bars). Every other library warning still shows."""
from __future__ import annotations

import logging
import re

NOISE = re.compile("|".join((
    r"Failed to load CPU gemm_4bit_forward",
    r"requires torchvision \(not installed\); falling back",
    r"that should be kept in float32: \[\]",
)))


class DropNoise(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not NOISE.search(record.getMessage())


def quiet_libraries() -> None:
    """Filter the known chatter on every handler it could reach; hide the libraries' loading bars."""
    from diffusers.utils import logging as diffusers_logging
    from transformers.utils import logging as transformers_logging

    transformers_logging.get_logger("transformers")  # creates the library's handler, so it can be filtered
    diffusers_logging.get_logger("diffusers")
    transformers_logging.disable_progress_bar()
    diffusers_logging.disable_progress_bar()
    drop = DropNoise()
    handlers = [logging.lastResort] if logging.lastResort else []  # loggers without a handler (bitsandbytes)
    for name in ("", "transformers", "diffusers", "bitsandbytes"):
        handlers += logging.getLogger(name).handlers
    for handler in handlers:
        if not any(isinstance(f, DropNoise) for f in handler.filters):
            handler.addFilter(drop)
