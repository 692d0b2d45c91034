"""The names of saves and where they live: SaveName (format, parse, list), training-state folders and their
manifests, 'latest', and the free-disk check. (Retention: retention.py.) Torch-free: the GUI and config
validation use it too.

Saves are named as kohya names them, beside each other in output_dir:
`<output_name>.safetensors` (the end of training), `<output_name>-000003.safetensors` (an epoch save),
`<output_name>-step00000500.safetensors` (a step save, or a stop); full models are folders of the same
names and/or such files, with `-ema` copies. A training state is the folder `<save name>-state`; its
`manifest.json` is written last and lists every file in it (also those in subfolders, e.g. each process's
shards), and the folder is renamed into place, so a folder under a final name is always complete.
"""
from __future__ import annotations

import json
import re
import shutil
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

from trainers.core.errors import DiskFull
from trainers.core.plan import StepPlan

STATE_FORMAT = "atelier-training-state"
STATE_VERSION = 1
MANIFEST = "manifest.json"
STATE_KINDS = ("epoch", "step", "stop", "rolling", "emergency", "final")
FILE_SUFFIX = ".safetensors"


@dataclass(frozen=True)
class Position:
    """How far a run is: `batches` (per process) of `epoch` were trained by optimizer step `step`."""

    step: int = 0
    epoch: int = 1
    batches: int = 0
    epoch_done: bool = False  # the end-of-epoch saves and samples of `epoch` are done too

    def next_epoch(self) -> int:
        return self.epoch + 1 if self.epoch_done else self.epoch

    @classmethod
    def of_manifest(cls, manifest: dict[str, Any]) -> "Position":
        """Where the run of a training state's manifest was."""
        return cls(int(manifest["step"]), int(manifest["epoch"]), int(manifest["batches"]),
                   bool(manifest.get("epoch_done")))


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


@dataclass(frozen=True)
class SaveName:
    """The name of one save: `<output_name>[-000003|-step00000500][-ema][-state]`, plus `.safetensors` for a file."""

    output_name: str
    epoch: int | None = None
    step: int | None = None  # a step save (wins over epoch)
    ema: bool = False
    state: bool = False
    suffix: str = ""  # ".safetensors" for a file, "" for a folder

    @property
    def kind(self) -> Literal["step", "epoch", "final"]:
        return "step" if self.step is not None else "epoch" if self.epoch is not None else "final"

    @property
    def number(self) -> int:
        """The step or epoch it was saved at (0 for the final save)."""
        return {"step": self.step, "epoch": self.epoch}.get(self.kind) or 0

    @property
    def stem(self) -> str:
        """The save's name without -state and suffix: what its training state and EMA copy are named after."""
        marker = {"step": f"-step{self.step or 0:08d}", "epoch": f"-{self.epoch or 0:06d}", "final": ""}[self.kind]
        return f"{self.output_name}{marker}"

    @property
    def filename(self) -> str:
        return f"{self.stem}{'-ema' if self.ema else ''}{'-state' if self.state else ''}{self.suffix}"

    @property
    def label(self) -> str:
        """How a person calls it: 'epoch 3', 'step 500', 'final' (' EMA' for an EMA copy)."""
        base = {"step": f"step {self.step}", "epoch": f"epoch {self.epoch}", "final": "final"}[self.kind]
        return base + (" EMA" if self.ema else "")

    def state_folder(self) -> "SaveName":
        return SaveName(self.output_name, self.epoch, self.step, state=True)

    @classmethod
    def parse(cls, filename: str, output_name: str) -> "SaveName | None":
        """The SaveName of `filename` when it is a save of `output_name` (not of `output_name-v2`), else None."""
        if not filename.startswith(output_name):
            return None
        m = _SAVE_TAIL.fullmatch(filename[len(output_name):])
        if m is None:
            return None
        epoch = int(m["epoch"]) if m["epoch"] else None
        step = int(m["step"]) if m["step"] else None
        return cls(output_name, epoch, step, ema=bool(m["ema"]), state=bool(m["state"]), suffix=m["suffix"] or "")


    @classmethod
    def guess(cls, filename: str) -> "SaveName | None":
        """The SaveName of a file whose output_name is not known: the part before an epoch or step marker."""
        m = _MARKED.fullmatch(filename)
        return cls.parse(filename, m["base"]) if m else None


_MARKED = re.compile(r"(?P<base>.+?)(?:-\d{6}|-step\d{8})(?:-ema)?(?:-state)?(?:\.safetensors)?")
_SAVE_TAIL = re.compile(r"(?:-(?P<epoch>\d{6})|-step(?P<step>\d{8}))?(?P<ema>-ema)?(?P<state>-state)?"
                        r"(?P<suffix>\.safetensors)?")


def save_name(output_name: str, epoch: int | None = None, step: int | None = None) -> str:
    """kohya's naming: name, name-000003, name-step00000100 (without suffix)."""
    return SaveName(output_name, epoch, step).stem


def state_name(name: str) -> str:
    """The state folder of a save: `lora-000002` -> `lora-000002-state`."""
    return f"{name}-state"


def list_saves(output_dir: Path, output_name: str) -> list[tuple[Path, SaveName]]:
    """Every save of `output_name` in `output_dir` (files, folders, EMA copies, states), by kind and number."""
    folder = Path(output_dir).expanduser()
    if not folder.is_dir():
        return []
    found = []
    for entry in folder.iterdir():
        name = SaveName.parse(entry.name, output_name)
        if name is not None and (entry.is_dir() or name.suffix) and (entry.is_dir() or not name.state):
            found.append((entry, name))
    return sorted(found, key=lambda item: (item[1].kind, item[1].number, item[0].name))


def planned_saves(output_name: str, every_n_steps: int | None, every_n_epochs: int | None, plan: StepPlan,
                  after: Position) -> list[SaveName]:
    """The step and epoch saves a run makes after `after` (where a resumed run goes on), in the order the training
    loop makes them: every N steps and every N epochs, before the end (that save is the final one)."""
    steps = [SaveName(output_name, step=s) for s in range(every_n_steps * (after.step // every_n_steps + 1),
                                                           plan.total_steps, every_n_steps)] if every_n_steps else []
    first = after.next_epoch()
    epochs = [SaveName(output_name, epoch=e) for e in range(every_n_epochs * -(-first // every_n_epochs),
                                                            plan.epochs, every_n_epochs)] if every_n_epochs else []
    return sorted(steps + epochs, key=lambda n: (n.step or (n.epoch or 0) * plan.steps_per_epoch, n.kind == "epoch"))


def written_before(path: Path, since: float | None) -> bool:
    """Whether `path` exists and was written before `since` (the time the run, or the first run of those it
    resumes, started: `run_started` in its training states), so not by that run. None: not known (a state
    written before states recorded it), nothing counts as written before."""
    if since is None:
        return False
    try:
        return Path(path).lstat().st_mtime < since
    except FileNotFoundError:
        return False


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
    found = []
    for path, name in list_saves(output_dir, output_name):
        if name.state and not name.ema:
            try:
                found.append(StateInfo(path, read_manifest(path)))
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


def folder_files(folder: Path) -> dict[str, int]:
    """Every file under `folder` (relative path -> size): what a manifest lists and read_manifest checks."""
    return {part.relative_to(folder).as_posix(): part.stat().st_size for part in sorted(Path(folder).rglob("*"))
            if part.is_file()}


def manifest_for(kind: str, at: Position, **fields: Any) -> dict[str, Any]:
    """The manifest of a state written now (`fields`: method, model, sizes, config, ...)."""
    if kind not in STATE_KINDS:
        raise ValueError(f"unknown state kind {kind!r}")
    return {"format": STATE_FORMAT, "version": STATE_VERSION, "kind": kind, **asdict(at), "time": time.time(),
            **fields}
