"""Secrets (hub and tracker tokens) come from the environment only and never reach a file we write.

`install_redaction()` wraps stdout/stderr so train.log cannot show them; `redact()` is applied
to every event before it is written. Config files cannot hold them: such keys are refused.
"""
from __future__ import annotations

import io
import os
import re
import sys
from collections.abc import Mapping
from typing import Any, TextIO

SECRET_ENV = ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "WANDB_API_KEY", "ATELIER_PASSWORD")
HUB_TOKENS = ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN")  # a trainer needs them for models named by hub id
# The name ends in the secret's kind: `hf_token`, `wandb_api_key`; not `max_token_length` or `token_warmup_step`.
SECRET_KEY = re.compile(r"(^|_)(token|api_key|apikey|password|passwd|secret|secret_key|access_key)$", re.IGNORECASE)
MASK = "***"


def secret_values() -> list[str]:
    # Short values would mask ordinary text; real tokens are long.
    return sorted({v for k in SECRET_ENV if len(v := os.environ.get(k, "")) >= 8}, key=len, reverse=True)


def redact(value: Any) -> Any:
    """`value` with every secret replaced by ***, recursing into dicts and lists."""
    secrets = secret_values()
    if not secrets:
        return value

    def clean(v: Any) -> Any:
        if isinstance(v, str):
            for s in secrets:
                v = v.replace(s, MASK)
            return v
        if isinstance(v, dict):
            return {k: clean(x) for k, x in v.items()}
        if isinstance(v, (list, tuple)):
            return type(v)(clean(x) for x in v)
        return v

    return clean(value)


class _RedactingStream(io.TextIOBase):
    def __init__(self, inner: TextIO) -> None:
        self.inner = inner

    def write(self, text: str) -> int:
        self.inner.write(redact(text))
        return len(text)

    def flush(self) -> None:
        self.inner.flush()

    def isatty(self) -> bool:
        return self.inner.isatty()

    def fileno(self) -> int:
        return self.inner.fileno()


def install_redaction() -> None:
    if secret_values() and not isinstance(sys.stdout, _RedactingStream):
        sys.stdout = _RedactingStream(sys.stdout)
        sys.stderr = _RedactingStream(sys.stderr)


def child_environment(env: Mapping[str, str], keep: tuple[str, ...] = ()) -> dict[str, str]:
    """`env` for a process the GUI starts: without the GUI's login (ATELIER_PASSWORD) and every variable named like a
    secret (WANDB_API_KEY, HF_TOKEN, AWS_SECRET_ACCESS_KEY, ...), except the names in `keep`."""
    return {k: v for k, v in env.items() if k in keep or not (k in SECRET_ENV or SECRET_KEY.search(k))}


def trainer_environment(env: Mapping[str, str]) -> dict[str, str]:
    """The environment a launched trainer or job gets: the hub token stays, for models named by hub id."""
    return child_environment(env, keep=HUB_TOKENS)
