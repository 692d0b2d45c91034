"""What a tool job writes to its events.jsonl, besides the warning, error and done every job writes. Torch-free:
the Tools tab reads these back (TOOL_EVENTS)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from trainers.core import events as ev


@dataclass(frozen=True, kw_only=True)
class ToolStart(ev.Event):
    type: ClassVar[str] = "tool_start"
    verb: str
    inputs: list[str]


@dataclass(frozen=True, kw_only=True)
class ToolProgress(ev.Event):
    """`done` of `total` units (modules, files) of the current `stage`."""

    type: ClassVar[str] = "tool_progress"
    stage: str
    done: int
    total: int
    eta_s: float | None = None


@dataclass(frozen=True, kw_only=True)
class ToolOutput(ev.Event):
    """A file or folder the job wrote: `kind` is lora, model or report."""

    type: ClassVar[str] = "tool_output"
    path: str
    kind: str


@dataclass(frozen=True, kw_only=True)
class ToolReport(ev.Event):
    """The job's result in words (Markdown), as its report.md holds it."""

    type: ClassVar[str] = "tool_report"
    title: str
    markdown: str


TOOL_EVENTS: dict[str, type[ev.Event]] = {
    kind.type: kind for kind in (ev.Warning, ev.Error, ev.Done, ToolStart, ToolProgress, ToolOutput, ToolReport)}
