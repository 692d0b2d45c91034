"""Where saves live: training-state folders and their manifests, finding 'latest', atomic folders and
free-disk checks (retention: retention.py). No torch here: the GUI and config validation use it too.

A training state is a folder beside the saves it belongs to, named as kohya names them:
`<output_name>-000003-state` (an epoch save), `<output_name>-step00000500-state` (a step save, a
stop, a rolling or an emergency state), `<output_name>-state` (the end of training). Its
`manifest.json` is written last and the folder is renamed into place, so a folder under a final
name is always complete.
"""
from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from trainers.core.errors import DiskFull
from trainers.core.fsio import _fsync_dir, current_umask
from trainers.core.processes import pid_alive

STATE_FORMAT = "atelier-training-state"
STATE_VERSION = 1
MANIFEST = "manifest.json"
STATE_KINDS = ("epoch", "step", "stop", "rolling", "emergency", "final")
_TMP_MARK = ".tmp-"
_SAFETENSORS_TEMP = re.compile(r"^\.tmp[A-Za-z0-9]{6}$")  # safetensors writes <dir>/.tmpXXXXXX, then renames it
_TEMP_PID = re.compile(r"\.(?:tmp|old|deleting)-(\d+)$")  # temp entries of atomic_dir / remove_save: <...>-<pid>
_STALE_TEMP_S = 600.0  # a temp entry of a save untouched this long is left over from a killed process


@dataclass(frozen=True)
class Position:
    """How far a run is: `batches` (per process) of `epoch` were trained by optimizer step `step`."""

    step: int = 0
    epoch: int = 1
    batches: int = 0
    epoch_done: bool = False  # the end-of-epoch saves and samples of `epoch` are done too

    def next_epoch(self) -> int:
        return self.epoch + 1 if self.epoch_done else self.epoch


@dataclass(frozen=True)
class StateInfo:
    path: Path
    manifest: dict[str, Any]

    @property
    def step(self) -> int:
        return int(self.manifest.get("step", 0))

    @property
    def kind(self) -> str:
        return str(self.manifest.get("kind", ""))


def save_name(output_name: str, epoch: int | None = None, step: int | None = None) -> str:
    """kohya's naming: name.safetensors, name-000003.safetensors, name-step00000100.safetensors."""
    if step is not None:
        return f"{output_name}-step{step:08d}"
    return f"{output_name}-{epoch:06d}" if epoch is not None else output_name


def state_name(name: str) -> str:
    """The state folder of a save: `lora-000002` -> `lora-000002-state`."""
    return f"{name}-state"


def read_manifest(folder: Path) -> dict[str, Any]:
    """The manifest of a state folder; ValueError says what is wrong with it."""
    try:
        manifest = json.loads((Path(folder) / MANIFEST).read_text(encoding="utf-8"))
    except FileNotFoundError:
        kohya = any((Path(folder) / n).exists() for n in ("optimizer.bin", "random_states_0.pkl", "scheduler.bin"))
        hint = ("; it looks like a kohya/accelerate state, which Atelier cannot read: resume from an Atelier "
                "'<name>-state' folder, or start from the LoRA file with network_weights") if kohya else ""
        raise ValueError(f"{folder} is not a training state (no {MANIFEST} inside){hint}") from None
    except (OSError, json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ValueError(f"{folder}/{MANIFEST} cannot be read: {err}") from None
    if not isinstance(manifest, dict) or manifest.get("format") != STATE_FORMAT:
        raise ValueError(f"{folder} is not an Atelier training state ({MANIFEST} has no format {STATE_FORMAT!r})")
    if int(manifest.get("version", 0)) > STATE_VERSION:
        raise ValueError(f"{folder} was saved by a newer Atelier (state version {manifest.get('version')}); "
                         "update Atelier to resume it")
    for name, size in manifest.get("files", {}).items():
        part = Path(folder) / name
        if not part.is_file() or part.stat().st_size != size:
            raise ValueError(f"{folder} is incomplete: {name} is missing or has the wrong size")
    return manifest


def find_states(output_dir: Path, output_name: str) -> list[StateInfo]:
    """Every complete training state of `output_name` in `output_dir`, in the order they were written.

    The last is what 'latest' resumes: after a resume from an older state, the states this run writes are
    newer than the higher steps of the run it branched from.
    """
    folder = Path(output_dir).expanduser()
    if not folder.is_dir():
        return []
    pattern = re.compile(rf"^{re.escape(output_name)}(-\d{{6}}|-step\d{{8}})?-state$")
    found = []
    for entry in folder.iterdir():
        if pattern.match(entry.name) and entry.is_dir():
            try:
                found.append(StateInfo(entry, read_manifest(entry)))
            except ValueError:
                continue  # incomplete or foreign: never resumed from
    return sorted(found, key=lambda s: (float(s.manifest.get("time", 0)), s.step))


def latest_state(output_dir: Path, output_name: str) -> StateInfo | None:
    states = find_states(output_dir, output_name)
    return states[-1] if states else None


def resolve_resume(resume: str, output_dir: str, output_name: str) -> Path:
    """The state folder `resume` names ('latest' or a path); ValueError with what to do otherwise."""
    text = resume.strip()
    if text.lower() == "latest":
        found = latest_state(Path(output_dir), output_name)
        if found is None:
            raise ValueError(f"'latest' found no training state of {output_name!r} in {output_dir}; states are "
                             f"saved with save_state, save_state_every_n_minutes, by Stop, or give a "
                             f"'<name>-state' folder")
        return found.path
    folder = Path(text).expanduser()
    if not folder.is_dir():
        raise ValueError(f"folder not found: {text}; give a '<name>-state' folder or 'latest'")
    read_manifest(folder)
    return folder


@contextlib.contextmanager
def atomic_dir(final: Path) -> Iterator[Path]:
    """Yield an empty temp folder beside `final`; when the block succeeds, fsync it and rename it into place.

    A SIGKILL at any moment leaves the previous `final` (or none) and at most a hidden temp
    folder, never a half-written folder under the final name. Files get 0o666 minus the umask.
    """
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = final.with_name(f".{final.name}{_TMP_MARK}{os.getpid()}")
    old = final.with_name(f".{final.name}.old-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        yield tmp
        mode = 0o666 & ~current_umask()
        for part in tmp.rglob("*"):
            if part.is_file():
                os.chmod(part, mode)
                with open(part, "rb") as fh:
                    os.fsync(fh.fileno())
        os.chmod(tmp, 0o777 & ~current_umask())
        _fsync_dir(tmp)
        if final.exists():
            os.replace(final, old)
        os.replace(tmp, final)
        _fsync_dir(final.parent)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(old, ignore_errors=True)


def remove_save(path: Path) -> None:
    """Delete a save (file or folder); a folder is first renamed away, so it vanishes at once."""
    path = Path(path)
    if path.is_dir():
        doomed = path.with_name(f".{path.name}.deleting-{os.getpid()}")
        os.replace(path, doomed)
        shutil.rmtree(doomed, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def clean_stale_temps(output_dir: Path, output_name: str, now: float | None = None) -> list[Path]:
    """Remove temp files/folders of saves of `output_name` left by a killed process; returns what went.

    Entries named with a process id go when that process is gone; others when untouched for 10 minutes.
    """
    folder = Path(output_dir).expanduser()
    if not folder.is_dir():
        return []
    now = time.time() if now is None else now
    removed = []
    for entry in folder.iterdir():
        name = entry.name
        ours = name.startswith(f".{output_name}") and (name.endswith(".tmp") or _TEMP_PID.search(name)
                                                        or ".old-" in name)
        if not ours and not _SAFETENSORS_TEMP.match(name):
            continue
        owner = _TEMP_PID.search(name)
        try:
            if owner and int(owner.group(1)) != os.getpid() and pid_alive(int(owner.group(1))):
                continue  # a live process is writing it
            if not owner and now - entry.stat().st_mtime < _STALE_TEMP_S:
                continue  # perhaps a save in progress right now
        except FileNotFoundError:
            continue
        if ".old-" in name:  # killed between the two renames of a folder save: put the old save back
            original = folder / name[1:name.index(".old-")]
            if not original.exists():
                os.replace(entry, original)
                continue
        shutil.rmtree(entry, ignore_errors=True) if entry.is_dir() else entry.unlink(missing_ok=True)
        removed.append(entry)
    return removed


def check_free_space(folder: Path, needed_bytes: int, what: str) -> None:
    """Raise DiskFull when `folder`'s disk has less than `needed_bytes` (plus a margin) free."""
    folder = Path(folder).expanduser()
    probe = folder
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    free = shutil.disk_usage(probe).free
    wanted = int(needed_bytes * 1.05) + (16 << 20)
    if free < wanted:
        raise DiskFull(f"not enough free disk space in output_dir ({folder}) to save {what}: it needs about "
                             f"{_gb(wanted)}, {_gb(free)} is free. Free some space (retention options "
                             f"save_last_n_epochs / save_last_n_steps delete older saves), then resume")


def _gb(n: int) -> str:
    return f"{n / 2**30:.2f} GB" if n >= 2**27 else f"{n / 2**20:.1f} MB"


def manifest_for(kind: str, at: Position, **fields: Any) -> dict[str, Any]:
    """The manifest of a state written now (`fields`: method, model, sizes, config, ...)."""
    if kind not in STATE_KINDS:
        raise ValueError(f"unknown state kind {kind!r}")
    return {"format": STATE_FORMAT, "version": STATE_VERSION, "kind": kind, **asdict(at), "time": time.time(),
            **fields}
