"""What a tool job writes to its events.jsonl besides every job's (trainers/core/job.py: warning, error, done,
progress, outputs, report): the verb it starts with. Torch-free: the Tools tab reads these back (TOOL_EVENTS)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from trainers.core import events as ev
from trainers.core.job import JOB_EVENTS


@dataclass(frozen=True, kw_only=True)
class ToolStart(ev.Event):
    type: ClassVar[str] = "tool_start"
    verb: str
    inputs: list[str]


TOOL_EVENTS: dict[str, type[ev.Event]] = {**JOB_EVENTS, ToolStart.type: ToolStart}
