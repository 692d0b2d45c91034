"""A job's run in its folder, one for every job beside training (generate, compare, tools, caption, masks): its
command's skeleton (the config loaded and checked, the folder, how it ended recorded), stop requests, progress with
an ETA, outputs and the report. Torch-free; imports only trainers.core.

A job's `main` is `checked_config` (an exit code when refused or printed), `job_folder` (its folder and Lifecycle),
then `run_reported` around the work. The progress, output and report events keep their `tool_*` names in
events.jsonl: the tools wrote them first, and the page and old job folders read them so.
"""
from __future__ import annotations

import argparse
import json
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from trainers.core import events as ev
from trainers.core.errors import EXIT_BAD_INPUT, BadInput
from trainers.core.fsio import atomic_write_text
from trainers.core.lifecycle import Lifecycle, job_started
from trainers.core.options.jobs import flag_values
from trainers.core.options.schema import ConfigError, ConfigIssue
from trainers.core.options.verbs import VerbConfig
from trainers.core.rundir import Request, RunState, take_requests

REPORT_MD, REPORT_JSON = "report.md", "report.json"
PROGRESS_EVERY_S = 0.5

Config = TypeVar("Config")
Verb = TypeVar("Verb", bound=VerbConfig)


class JobStopped(RuntimeError):
    """The user stopped the job; what it says was kept (or that nothing half-written was)."""


def stop_requested(folder: Path | None) -> bool:
    """Whether the job folder's control holds a stop request (taken: asked once, answered once)."""
    return Request.STOP in take_requests(folder)


# ---- events -----------------------------------------------------------------------------------------------------

@dataclass(frozen=True, kw_only=True)
class JobProgress(ev.Event):
    """`done` of `total` units (modules, files, images) of the current `stage`."""

    type: ClassVar[str] = "tool_progress"
    stage: str
    done: int
    total: int
    eta_s: float | None = None


@dataclass(frozen=True, kw_only=True)
class JobOutput(ev.Event):
    """A file or folder the job wrote: `kind` is lora, model or report."""

    type: ClassVar[str] = "tool_output"
    path: str
    kind: str


@dataclass(frozen=True, kw_only=True)
class JobReport(ev.Event):
    """The job's result in words (Markdown), as its report.md holds it."""

    type: ClassVar[str] = "tool_report"
    title: str
    markdown: str


JOB_EVENTS: dict[str, type[ev.Event]] = {
    kind.type: kind for kind in (ev.Warning, ev.Error, ev.Done, JobProgress, JobOutput, JobReport)}


class JobFolder:
    """What a job's work writes to its folder (None: nothing but the outputs, e.g. when called from tests)."""

    def __init__(self, cfg: Any, folder: Path | None, events: ev.EventWriter | None = None) -> None:
        self.cfg, self.folder = cfg, Path(folder) if folder is not None else None
        self.events = events or ev.EventWriter(self.folder)
        self.outputs: list[Path] = []
        self._stage: tuple[str, float] = ("", time.monotonic())
        self._last = 0.0

    def stop_requested(self) -> bool:
        return stop_requested(self.folder)

    def progress(self, stage: str, done: int, total: int) -> None:
        """Report `done` of `total` in `stage` (at most every half second, and at the end); raise JobStopped when
        the user asked the job to stop."""
        now = time.monotonic()
        if stage != self._stage[0]:
            self._stage = (stage, now)
        if self.stop_requested():
            raise JobStopped(f"stopped during {stage} ({done} of {total}); nothing was written")
        if done < total and now - self._last < PROGRESS_EVERY_S:
            return
        self._last = now
        elapsed = now - self._stage[1]
        eta = round(elapsed / done * (total - done), 1) if 0 < done < total else None
        self.events.emit(JobProgress(stage=stage, done=done, total=total, eta_s=eta))

    def wrote(self, path: Path, kind: str) -> None:
        self.outputs.append(Path(path))
        self.events.emit(JobOutput(path=str(path), kind=kind))

    def warn(self, message: str) -> None:
        self.events.warn(message)

    def report(self, title: str, markdown: str, data: dict[str, Any], details: str = "") -> None:
        """The result in words and as data: report.md (with `details`, e.g. a row per module) and report.json in the
        job folder, and a report event (without the details: the page shows it)."""
        if self.folder is not None:
            atomic_write_text(self.folder / REPORT_MD, f"# {title}\n\n{markdown}\n\n{details}".rstrip() + "\n")
            atomic_write_text(self.folder / REPORT_JSON, json.dumps(data, indent=2, ensure_ascii=False) + "\n")
            self.wrote(self.folder / REPORT_MD, "report")
            self.wrote(self.folder / REPORT_JSON, "report")
        self.events.emit(JobReport(title=title, markdown=markdown))


# ---- the command ------------------------------------------------------------------------------------------------

def checked_config(args: argparse.Namespace, load: Callable[[], Config], check: Callable[[Config], list[ConfigIssue]],
                   refused: str) -> Config | int:
    """The job's config (`load`: from --config, --set and the option flags), checked; an exit code instead when it
    has problems (recorded in --run-dir after `refused`) or --print-config printed it."""
    from trainers.core.secrets import install_redaction

    install_redaction()
    try:
        cfg = load()
        issues = check(cfg)
        if issues:
            raise ConfigError(issues)
    except ConfigError as err:
        return Lifecycle(args.run_dir).failed(f"{refused}:\n{err}", EXIT_BAD_INPUT)
    if args.print_config:
        print(cfg.to_toml())  # type: ignore[attr-defined]
        return 0
    return cfg


def job_folder(args: argparse.Namespace, cfg: Any, new_job_dir: Callable[[Path, Any], Path],
               **status: Any) -> tuple[Path, Lifecycle]:
    """The job's folder (--run-dir, else a new one under runs/) with its config written and the job recorded as
    running (`status`: its method and verb)."""
    job_dir = args.run_dir or new_job_dir(Path("runs"), cfg)
    return job_dir, job_started(job_dir, cfg, **status)


@dataclass
class JobEnd:
    """How a job's work ended well: its output, the status message, what it prints as JSON, and the done event's
    own fields."""

    output: str
    message: str
    printed: dict[str, Any]
    done: dict[str, Any] = field(default_factory=dict)


def run_reported(life: Lifecycle, job_dir: Path, work: Callable[[], JobEnd], label: str = "",
                 bad_input: tuple[type[BaseException], ...] = (BadInput,),
                 failures: tuple[type[BaseException], ...] = ()) -> int:
    """Run a job's `work` and record in the job's folder how it ended: finished, stopped by the user, bad input
    named (`bad_input`: exit code 2), a known failure (`failures`: exit code 1, no trace), or failed with the
    error and its trace. Messages start with `label: ` when given."""
    prefix = f"{label}: " if label else ""
    try:
        end = work()
    except JobStopped as stopped:
        life.stopped(str(job_dir), str(stopped), record_output=False)
        print(str(stopped))
        return 0
    except failures as err:
        return life.failed(f"{prefix}{err}", 1)
    except bad_input as err:
        return life.failed(f"{prefix}{err}", EXIT_BAD_INPUT)
    except KeyboardInterrupt:
        return life.failed("stopped by the user (interrupt)", 130, state=RunState.STOPPED)
    except Exception as err:  # noqa: BLE001 - report anything to the job folder, then fail
        traceback.print_exc()
        return life.failed(f"{prefix}{type(err).__name__}: {err}", 1, trace=traceback.format_exc(limit=-8))
    life.finished(end.output, end.message, **end.done)
    print(json.dumps(end.printed, ensure_ascii=False))
    return 0


def run_verb_job(args: argparse.Namespace, config: type[Verb], check: Callable[[Verb], list[ConfigIssue]],
                 new_job_dir: Callable[[Path, Verb], Path], method: str,
                 work: Callable[[Verb, Path, Lifecycle], JobEnd]) -> int:
    """The `main` of a command with verbs (`tools <verb>`, `caption`, `masks`): the verb's config from --config,
    --set and the option flags, checked, its job folder, then `work(cfg, job_dir, life)` reported there."""
    name = f"{config.command}{args.verb}"
    cfg = checked_config(args, lambda: config.load(args.verb, args.config, args.overrides, flag_values(args)),
                         check, f"{name}: the options have problems")
    if isinstance(cfg, int):
        return cfg
    job_dir, life = job_folder(args, cfg, new_job_dir, method=method, verb=cfg.verb)
    return run_reported(life, job_dir, lambda: work(cfg, job_dir, life), name)
