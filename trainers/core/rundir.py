"""The run directory: the contract between the GUI and a trainer (or generation job) process.

Every file name is spelled here and nowhere else. `status.json` is the one place a run's state
lives; the GUI and the trainer both update it under a lock (`update_status`), and `effective_state`
corrects it for a process that died without saying so. Control requests (stop, save_now, pause, continue) are
flag files in `control/` that the GUI writes and the trainer consumes; a render request (what a paused run renders
with its live weights) is a JSON file beside them. Torch-free.
"""
from __future__ import annotations

import json
import os
import time
import tomllib
from collections.abc import Iterator
from contextlib import contextmanager
from enum import Enum
from pathlib import Path
from typing import Any

from trainers.core.fsio import atomic_write_text
from trainers.core.processes import group_alive, pid_alive
from trainers.core.render_request import RenderRequest
from trainers.core.secrets import redact

CONFIG = "config.toml"  # the full resolved config
COMMAND = "command.txt"  # the exact argv that was launched
ACCELERATE_CONFIG = "accelerate.yaml"  # DeepSpeed / FSDP runs only
STATUS = "status.json"
STATUS_LOCK = "status.lock"
EVENTS = "events.jsonl"
LOG = "train.log"  # stdout and stderr of every process
CONTROL = "control"  # flag files: one per pending request
SAMPLES = "samples"
HEALTH = "health"  # a health report per save (<save file name>.json, trainers/health/)
SCORES = "scores.json"  # every sampling's scores and the best save (trainers/scores/)
SCORE_CACHE = "score_cache"  # the training images' embeddings, computed once per run and score model
IMAGES = "images"  # a generation job's images (unless it names another folder)
LIVE = "live"  # what a paused run rendered with its live weights for the Generate tab (trainers/train/live_render.py)
RENDER_REQUEST = "render.json"  # in control/: the render a paused run is asked for (write_render_request)


class RunState(str, Enum):
    """The states status.json records; a str, so it is written and compared as its value."""

    QUEUED = "queued"  # waits for its GPUs (the GUI's queue starts it)
    STARTING = "starting"
    RUNNING = "running"
    PAUSED = "paused"  # a trainer waiting for Continue, its model loaded (trainers/train/user_pause.py)
    STOPPING = "stopping"
    FINISHED = "finished"
    FAILED = "failed"
    STOPPED = "stopped"
    UNKNOWN = "unknown"

    def __str__(self) -> str:
        return self.value

    __hash__ = str.__hash__  # equal to its value as a plain string, in sets and dicts too

    @property
    def active(self) -> bool:
        return self in ACTIVE_STATES

    @classmethod
    def of(cls, value: Any) -> "RunState":
        try:
            return cls(value)
        except ValueError:
            return cls.UNKNOWN


ACTIVE_STATES = frozenset({RunState.STARTING, RunState.RUNNING, RunState.PAUSED, RunState.STOPPING})


class Request(str, Enum):
    """What the GUI can ask of a running process (a flag file each)."""

    STOP = "stop"
    SAVE_NOW = "save_now"
    PAUSE = "pause"  # wait at the next step boundary, the model kept loaded, until CONTINUE or STOP
    CONTINUE = "continue"

    def __str__(self) -> str:
        return self.value

    __hash__ = str.__hash__


def read_run_config(run_dir: Path) -> dict[str, Any] | None:
    """A run's config.toml as one flat {name: value} dict, its `method` included; None when missing or unreadable.

    For reading what a run was (its saves, prompts, model); loading it to train again is load_config's job.
    """
    from trainers.core.options.loading import flatten

    try:
        raw = tomllib.loads((Path(run_dir) / CONFIG).read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError):
        return None
    flat = flatten(raw, [])
    if isinstance(raw.get("method"), str):
        flat["method"] = raw["method"]
    return flat


def read_scores(run_dir: Path) -> dict[str, Any]:
    """A run's scores.json (trainers/scores/: records, best, overfitting_from_epoch); {} when none or unreadable."""
    try:
        data = json.loads((Path(run_dir) / SCORES).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def read_status(run_dir: Path | None) -> dict[str, Any]:
    """status.json as a dict; empty when there is none (yet) or it cannot be read."""
    if run_dir is None:
        return {}
    try:
        status = json.loads((Path(run_dir) / STATUS).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return status if isinstance(status, dict) else {}


def update_status(run_dir: Path | None, **fields: Any) -> None:
    """Merge `fields` into status.json (atomically: readers never see half a file).

    The GUI and the trainer both update it; a lock on status.lock keeps one's update from
    erasing the other's (read-modify-write).
    """
    if run_dir is None:
        return
    path = Path(run_dir) / STATUS
    with _locked(path.with_name(STATUS_LOCK)):
        status = read_status(run_dir)
        status.update(redact(fields), updated=time.time())
        atomic_write_text(path, json.dumps(status, indent=1, ensure_ascii=False))


@contextmanager
def _locked(lock_path: Path) -> Iterator[None]:
    """An exclusive advisory lock (POSIX); elsewhere, no lock."""
    try:
        import fcntl
    except ImportError:
        yield
        return
    with open(lock_path, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def effective_state(status: dict[str, Any]) -> RunState:
    """The state, corrected for a run whose processes all ended without saying so (SIGKILL, OOM killer): failed
    (stopped, when it was stopping). lifecycle.settled_state writes the correction into status.json."""
    state = RunState.of(status.get("state", "unknown"))
    if state.active and not processes_alive(status):
        return RunState.STOPPED if state == RunState.STOPPING else RunState.FAILED
    return state


def processes_alive(status: dict[str, Any]) -> bool:
    """Whether any process of the run is left: its process group (the launcher's own: every process it started,
    also one orphaned by a killed launcher), else its launcher or trainer process."""
    if pid_alive(status.get("launcher_pid") or status.get("trainer_pid")):
        return True  # the common case, without a look through every process of the machine
    return bool(status.get("pgid")) and group_alive(int(status["pgid"]))


def request(run_dir: Path, name: Request | str) -> None:
    """Ask the process of `run_dir` for `name` (the GUI's side)."""
    try:
        wanted = Request(name)
    except ValueError:
        raise ValueError(f"unknown request {name!r}; known: {', '.join(r.value for r in Request)}") from None
    folder = Path(run_dir) / CONTROL
    folder.mkdir(parents=True, exist_ok=True)
    (folder / wanted.value).touch()


def take_requests(run_dir: Path | None) -> set[Request]:
    """The pending requests of `run_dir`, consumed (the process's side)."""
    folder = Path(run_dir) / CONTROL if run_dir is not None else None
    found: set[Request] = set()
    if folder is None or not folder.is_dir():
        return found
    for wanted in Request:
        flag = folder / wanted.value
        if flag.exists():
            found.add(wanted)
            flag.unlink(missing_ok=True)
    return found


def write_render_request(run_dir: Path, wanted: RenderRequest) -> None:
    """Ask the paused run of `run_dir` to render `wanted` (the GUI's side; atomic: the trainer never reads half a
    request). A request not taken yet is replaced."""
    folder = Path(run_dir) / CONTROL
    folder.mkdir(parents=True, exist_ok=True)
    atomic_write_text(folder / RENDER_REQUEST, json.dumps(wanted.to_json(), ensure_ascii=False))


def take_render_request(run_dir: Path | None) -> dict[str, Any] | str | None:
    """The pending render request of `run_dir`, consumed: its JSON object (checked by parse_render_request), the
    reason it cannot be one, or None when there is none."""
    path = Path(run_dir) / CONTROL / RENDER_REQUEST if run_dir is not None else None
    if path is None:
        return None
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as err:
        return f"the render request could not be read: {err}"
    finally:
        path.unlink(missing_ok=True)
    try:
        data = json.loads(raw.decode("utf-8"))
    except ValueError as err:  # UnicodeDecodeError is one
        return f"the render request is not JSON: {err}"
    return data if isinstance(data, dict) else f"a render request is a JSON object, not {type(data).__name__}"


def new_run_dir(runs_root: Path, name: str) -> Path:
    """`<runs_root>/<time>-<name>-<pid>` (not created): unique, sortable, safe on every filesystem."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in name)[:60] or "run"
    return Path(runs_root) / f"{stamp}-{safe}-{os.getpid()}"
