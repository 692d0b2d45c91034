"""The model libraries as a run imports them: quiet and without what training never uses.

Library chatter kept out of train.log and the page's log: notes that tell someone training nothing
(an optional CPU kernel package of bitsandbytes, torchvision fallbacks for image processors we never use,
an empty list of float32 modules, weight-loading bars). Every other library warning still shows.
"""
from __future__ import annotations

import logging
import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager

NOISE = re.compile("|".join((
    r"Failed to load CPU gemm_4bit_forward",
    r"requires torchvision \(not installed\); falling back",
    r"that should be kept in float32: \[\]",
    r"torchao/_C\w*\.\S*so: Could not load",  # torchao's CUDA kernels on a CPU build of torch
    r"is an Enum subclass and is now natively supported by torch.compile",  # torchao's registrations
    r"Unable to import `torchao` Tensor objects",  # diffusers naming torchao classes newer torchao has not
)))


class DropNoise(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not NOISE.search(record.getMessage())


def quiet_libraries() -> None:
    """Import diffusers, transformers and peft without bitsandbytes and torchao (see `held_off`); filter the known
    chatter on every handler it could reach; hide the libraries' loading bars."""
    with held_off("bitsandbytes"), held_off("torchao"):
        import peft  # noqa: F401 - imported by diffusers' models; its helpers import bitsandbytes if they can
        from diffusers.utils import logging as diffusers_logging
        from transformers.utils import logging as transformers_logging

    transformers_logging.get_logger("transformers")  # creates the library's handler, so it can be filtered
    diffusers_logging.get_logger("diffusers")
    transformers_logging.disable_progress_bar()
    diffusers_logging.disable_progress_bar()
    drop = DropNoise()
    handlers = [logging.lastResort] if logging.lastResort else []  # loggers without a handler (bitsandbytes)
    for name in ("", "transformers", "diffusers", "bitsandbytes", "torchao", "torch"):
        handlers += logging.getLogger(name).handlers
    for handler in handlers:
        if not any(isinstance(f, DropNoise) for f in handler.filters):
            handler.addFilter(drop)


@contextmanager
def held_off(package: str) -> Iterator[None]:
    """Libraries imported inside see `package` as not installed, unless it was imported before.

    For bitsandbytes: diffusers, transformers and peft import it when it is installed, for quantized models the
    trainers never load, and its import wraps kernels in torch.compile, which imports torch's compiler (about 1 s of
    the ~5 s before a tiny run's first step). The 8-bit optimizers import it themselves when a run uses one, as
    trainers/quant does torchao and bitsandbytes for base_model_precision."""
    if package in sys.modules:
        yield
        return
    sys.modules[package] = None  # type: ignore[assignment]  # import machinery: "not installed"
    try:
        yield
    finally:
        if sys.modules.get(package, 0) is None:
            del sys.modules[package]
