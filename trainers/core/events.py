"""The event stream of a run or generation job (events.jsonl): one typed record per event type.

Only rank 0 (or the job's coordinator) writes. Each line is one JSON object with `type`, `time`
and the record's fields (fields left None are not written). Readers tail the file with a byte
cursor (`EventReader`) and get records back; a line of an unknown type or a damaged line is
skipped, fields a record does not know are ignored (an older GUI reads a newer trainer's files).

A training run writes TRAINING_EVENTS, a generation job JOB_EVENTS; both share warning, error
and done. Torch-free.
"""
from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, ClassVar, Type, TypeVar

from trainers.core.rundir import EVENTS
from trainers.core.secrets import redact

E = TypeVar("E", bound="Event")


@dataclass(frozen=True, kw_only=True)
class Event:
    type: ClassVar[str] = ""
    time: float = 0.0  # set by the writer

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v is not None and k != "time"}

    @classmethod
    def from_json(cls: Type[E], data: dict[str, Any]) -> E:  # typing.Type: `type` here is the ClassVar above
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})


# ---- shared by runs and jobs --------------------------------------------------------------------------------

@dataclass(frozen=True, kw_only=True)
class Warning(Event):  # noqa: A001 - the event's own name
    type: ClassVar[str] = "warning"
    message: str


@dataclass(frozen=True, kw_only=True)
class Error(Event):
    """Why a run or job failed. `kind` is the cause's class (non_finite_loss, out_of_memory, disk_full, ...);
    `suggestions` say what to change; `saved_state` is an emergency training state to resume from."""

    type: ClassVar[str] = "error"
    message: str
    exit_code: int = 1
    kind: str | None = None
    suggestions: list[str] | None = None
    cause: str | None = None
    saved_state: str | None = None
    steps: list[int] | None = None
    rank: int | None = None
    trace: str | None = None


@dataclass(frozen=True, kw_only=True)
class Done(Event):
    type: ClassVar[str] = "done"
    output: str
    stopped: bool | None = None
    images: int | None = None  # generation jobs
    prompt_encodes: int | None = None
    failed_workers: list[str] | None = None


# ---- training runs ------------------------------------------------------------------------------------------

@dataclass(frozen=True, kw_only=True)
class Start(Event):
    type: ClassVar[str] = "start"
    plan: dict[str, Any]
    family: str
    trainable_params: int


@dataclass(frozen=True, kw_only=True)
class Progress(Event):
    """One optimizer step. Rates are wall-clock over a recent window; images_per_s counts every process."""

    type: ClassVar[str] = "progress"
    step: int
    total_steps: int
    epoch: int
    total_epochs: int
    loss: float
    loss_smoothed: float
    lr: float  # the rate this step trained with (first parameter group), as the planned schedule counts steps
    it_per_s: float
    images_per_s: float
    eta_s: float | None = None
    data_share: float = 0.0  # share of step time spent waiting for data
    peak_mem_gb: float = 0.0
    peak_mem_kind: str = "host"  # "cuda" or "host"
    step_s_own: float | None = None  # rank 0's own work a step (without waiting for the others)
    rank_step_s: list[float] | None = None  # each process's own seconds a step (every few steps, multi-GPU)
    grad_buckets: int | None = None  # DDP gradient buckets reduced this step
    keys_scaled: int | None = None  # scale_weight_norms: modules scaled down after this step
    average_key_norm: float | None = None
    max_key_norm: float | None = None


@dataclass(frozen=True, kw_only=True)
class Validation(Event):
    """The loss on the held-out images (validation_split), averaged over every process's share of them.
    `kind`: "step" (validate_every_n_steps) or "epoch" (at an epoch's end); `divergence` is the loss minus the
    smoothed training loss (sd-scripts' loss/validation/*_divergence)."""

    type: ClassVar[str] = "validation"
    step: int
    epoch: int
    loss: float
    kind: str = "step"
    divergence: float | None = None
    batches: int = 0


@dataclass(frozen=True, kw_only=True)
class Checkpoint(Event):
    type: ClassVar[str] = "checkpoint"
    path: str
    epoch: int
    step: int
    final: bool = False
    kind: str = "step"  # epoch, step, stop, rolling, emergency, final
    state: str | None = None  # the training state folder written with it


@dataclass(frozen=True, kw_only=True)
class Health(Event):
    """The health check of one save (trainers/health/): `verdict` "healthy" or "warnings", each warning with its
    reason; `report` is the JSON file under the run's health/ folder."""

    type: ClassVar[str] = "health"
    path: str
    step: int
    verdict: str
    warnings: list[str] = field(default_factory=list)
    report: str | None = None


@dataclass(frozen=True, kw_only=True)
class Scores(Event):
    """The scores of one sampling (trainers/scores/): prompt fidelity and likeness of its sample images, the save of
    that step (None: it sampled without saving), the best save so far by best_save_rule, and the epoch overfitting
    starts from (likeness rising while fidelity falls), if seen; `report` is the run's scores.json."""

    type: ClassVar[str] = "scores"
    step: int
    epoch: int
    fidelity: float | None = None
    likeness: float | None = None
    save: str | None = None
    best_save: str | None = None
    best_step: int | None = None
    overfitting_from_epoch: int | None = None
    report: str | None = None


@dataclass(frozen=True, kw_only=True)
class Sample(Event):
    type: ClassVar[str] = "sample"
    path: str
    prompt: str
    step: int
    epoch: int
    index: int


@dataclass(frozen=True, kw_only=True)
class LiveRender(Event):
    """A paused run's answer to a render request (trainers/core/render_request.py): `path` the image (or clip) it
    rendered with its live weights at step `step`, or `error` why it rendered none; `request` is the request's id."""

    type: ClassVar[str] = "live_render"
    request: str
    step: int
    path: str | None = None
    prompt: str = ""
    seed: int | None = None
    multiplier: float | None = None
    error: str | None = None


@dataclass(frozen=True, kw_only=True)
class Dataset(Event):
    """The preflight report of the data the run trains on (folders, buckets, skipped files, steps)."""

    type: ClassVar[str] = "dataset"
    report: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return dict(self.report)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "Dataset":
        return cls(report={k: v for k, v in data.items() if k not in ("type", "time")}, time=data.get("time", 0.0))


@dataclass(frozen=True, kw_only=True)
class Cache(Event):
    """Latents or text-encoder outputs being cached before training."""

    type: ClassVar[str] = "cache"
    what: str
    done: int
    total: int


@dataclass(frozen=True, kw_only=True)
class Resume(Event):
    type: ClassVar[str] = "resume"
    path: str
    step: int
    epoch: int
    batches: int
    saved_kind: str | None = None


@dataclass(frozen=True, kw_only=True)
class ClassImages(Event):
    """Dreambooth: class images generated into `folder` before training."""

    type: ClassVar[str] = "class_images"
    folder: str
    count: int
    prompt: str


@dataclass(frozen=True, kw_only=True)
class Info(Event):
    type: ClassVar[str] = "info"
    message: str


# ---- generation jobs ----------------------------------------------------------------------------------------

@dataclass(frozen=True, kw_only=True)
class JobStart(Event):
    type: ClassVar[str] = "start"
    mode: str
    seed: int
    total_images: int
    items: int
    prompts: int
    variants: list[str]
    workers: list[str]
    out_dir: str


@dataclass(frozen=True, kw_only=True)
class Image(Event):
    type: ClassVar[str] = "image"
    path: str
    prompt: str
    negative: str
    prompt_index: int
    index: int
    seed: int
    order: int  # position in the job's image list
    variant: int
    label: str
    worker: int


@dataclass(frozen=True, kw_only=True)
class GenerateProgress(Event):
    type: ClassVar[str] = "generate_progress"
    done: int
    total: int
    images_per_s: float
    eta_s: float | None = None
    seconds: float | None = None  # of the item just finished


@dataclass(frozen=True, kw_only=True)
class Grid(Event):
    type: ClassVar[str] = "grid"
    path: str
    copy: str | None = None  # the copy beside the compared run
    rows: int = 0
    columns: int = 0


def _registry(*kinds: type[Event]) -> dict[str, type[Event]]:
    return {k.type: k for k in kinds}


_SHARED = (Warning, Error, Done)
TRAINING_EVENTS = _registry(*_SHARED, Start, Progress, Validation, Checkpoint, Sample, Dataset, Cache, Resume,
                            ClassImages, Info, Health, Scores, LiveRender)
JOB_EVENTS = _registry(*_SHARED, JobStart, Image, GenerateProgress, Grid)


class EventWriter:
    """Appends records to <run_dir>/events.jsonl; does nothing when disabled (ranks other than 0) or without a folder."""

    def __init__(self, run_dir: Path | None, enabled: bool = True) -> None:
        self.enabled = enabled and run_dir is not None
        self.path = Path(run_dir) / EVENTS if run_dir is not None else None
        if self.path is not None and self.enabled:
            self.path.parent.mkdir(parents=True, exist_ok=True)

    def emit(self, record: Event) -> None:
        if self.path is None or not self.enabled:
            return
        data = {"type": record.type, "time": round(time.time(), 3), **record.to_json()}
        line = json.dumps(redact(data), ensure_ascii=False)
        with open(self.path, "a", encoding="utf-8") as fh:
            fh.write(line + "\n")

    def warn(self, message: str) -> None:
        """A warning for the user: on stderr (train.log) and as an event."""
        if self.enabled:
            print(f"warning: {message}", file=sys.stderr, flush=True)
        self.emit(Warning(message=message))


class TextTail:
    """Incremental reader of a growing text file; returns complete new lines only."""

    def __init__(self, path: Path, start_from_end_bytes: int | None = None) -> None:
        self.path = Path(path)
        self.offset = 0
        self._partial = b""
        self._start_from_end = start_from_end_bytes

    def read_new(self, max_bytes: int = 64 << 20) -> list[str]:
        try:
            with open(self.path, "rb") as fh:
                if self._start_from_end is not None:  # first read of a long log: only its end
                    size = fh.seek(0, os.SEEK_END)
                    self.offset = max(0, size - self._start_from_end)
                    self._start_from_end = None
                fh.seek(self.offset)
                chunk = fh.read(max_bytes)
        except FileNotFoundError:
            return []
        self.offset += len(chunk)
        data = self._partial + chunk
        end = data.rfind(b"\n") + 1  # complete lines end here; the rest waits for its newline
        self._partial = data[end:]
        if not end:
            return []
        return [line.rstrip("\r") for line in data[:end].decode("utf-8", "replace").split("\n")[:-1]]


def progress_line(line: str) -> bool:
    """Whether a raw events.jsonl line is a progress event (cheap: long backlogs parse only a sample of them)."""
    return line.startswith('{"type": "progress"')


def parse_event(line: str, kinds: dict[str, type[Event]]) -> Event | None:
    """The record of one line; None for a damaged line, an unknown type or missing fields."""
    try:
        data = json.loads(line)
        kind = kinds[data["type"]]
        record = kind.from_json(data)
    except (ValueError, KeyError, TypeError):
        return None
    return record


class EventReader:
    """Reads the records appended to a run's events.jsonl since the last call (a byte cursor, never a re-read)."""

    def __init__(self, run_dir: Path, kinds: dict[str, type[Event]] = TRAINING_EVENTS) -> None:
        self.kinds = kinds
        self.tail = TextTail(Path(run_dir) / EVENTS)

    def read_lines(self) -> list[str]:
        return self.tail.read_new()

    def parse(self, line: str) -> Event | None:
        return parse_event(line, self.kinds)

    def read_new(self) -> list[Event]:
        return [e for e in map(self.parse, self.read_lines()) if e is not None]


def read_events(run_dir: Path, kinds: dict[str, type[Event]] = TRAINING_EVENTS) -> list[Event]:
    """Every record of a run's events.jsonl (empty when there is none)."""
    return EventReader(run_dir, kinds).read_new()
