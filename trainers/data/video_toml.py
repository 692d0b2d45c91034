"""musubi-tuner's dataset TOML for video runs, read with musubi's keys, meanings and defaults
(src/musubi_tuner/dataset/config_utils.py). Torch-free.

    [general]                     # defaults for every dataset
    resolution = [960, 544]       # (width, height); one number is a square
    caption_extension = ".txt"
    batch_size = 1
    enable_bucket = true
    [[datasets]]                  # one folder (or JSONL file) each; no subsets
    video_directory = "clips"     # or video_jsonl_file, image_directory, image_jsonl_file
    target_frames = [1, 25, 45]   # each rounded down to 1 + 4k
    frame_extraction = "head"     # head, chunk, slide, uniform, full
    frame_stride = 1              # slide
    frame_sample = 1              # uniform
    max_frames = 129              # full
    source_fps = 30.0             # the clips' rate; frames are dropped to the family's

A value is looked up in the dataset, then [general], then musubi-tuner's default. Relative paths are read from the
config file's folder, else the working directory. Keys musubi-tuner has that are not honoured here
(control_directory, FramePack's fp_*, multiple_target, ...) are refused by name; unknown keys too.
"""
from __future__ import annotations

import json
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainers.core.options.loading import closest
from trainers.core.options.schema import ConfigError, ConfigIssue
from trainers.data.frames import EXTRACTIONS

FIELD = "dataset_config"
SOURCES = ("video_directory", "video_jsonl_file", "image_directory", "image_jsonl_file")
GENERAL_KEYS = ("resolution", "caption_extension", "batch_size", "num_repeats", "enable_bucket", "bucket_no_upscale")
VIDEO_KEYS = ("target_frames", "frame_extraction", "frame_stride", "frame_sample", "max_frames", "source_fps")
DATASET_KEYS = GENERAL_KEYS + SOURCES + VIDEO_KEYS + ("cache_directory",)
REFUSED = {  # musubi-tuner keys this reader knows and does not honour
    "control_directory": "control videos/images (musubi-tuner's FunControl and edit training) are not read for "
                         "video runs yet",
    "fp_latent_window_size": "FramePack's keys: FramePack is not trained here",
    "fp_1f_clean_indices": "FramePack's keys: FramePack is not trained here",
    "fp_1f_target_index": "FramePack's keys: FramePack is not trained here",
    "fp_1f_no_post": "FramePack's keys: FramePack is not trained here",
    "multiple_target": "multiple target images per item are not read",
    "no_resize_control": "control images are not read for video runs",
    "control_resolution": "control images are not read for video runs",
}
IGNORED = {"debug_dataset": "use `python -m trainers preflight` to inspect a dataset"}
DEFAULTS: dict[str, Any] = {  # musubi-tuner's BaseDatasetParams / VideoDatasetParams
    "resolution": (960, 544), "enable_bucket": False, "bucket_no_upscale": False, "caption_extension": ".txt",
    "batch_size": 1, "num_repeats": 1, "target_frames": (1,), "frame_extraction": "head", "frame_stride": 1,
    "frame_sample": 1, "max_frames": 129, "source_fps": None,
}


@dataclass(frozen=True)
class VideoDatasetSpec:
    """One [[datasets]] entry: a folder of clips (or images), or a JSONL list of them."""

    label: str
    is_image: bool  # image_directory / image_jsonl_file: every item trains as a 1-frame clip
    directory: Path | None
    jsonl: Path | None
    resolution: tuple[int, int]  # (width, height)
    enable_bucket: bool = False
    bucket_no_upscale: bool = False
    caption_extension: str = ".txt"
    batch_size: int = 1
    num_repeats: int = 1
    target_frames: tuple[int, ...] = (1,)
    frame_extraction: str = "head"
    frame_stride: int = 1
    frame_sample: int = 1
    max_frames: int = 129
    source_fps: float | None = None
    cache_directory: Path | None = None

    @property
    def source(self) -> Path:
        return self.directory if self.directory is not None else self.jsonl  # type: ignore[return-value]


def is_musubi_dataset_config(raw: Mapping[str, Any]) -> bool:
    """A dataset TOML in musubi-tuner's layout: [[datasets]] naming their folder or JSONL file, without subsets."""
    datasets = raw.get("datasets")
    return isinstance(datasets, list) and any(isinstance(d, dict) and any(k in d for k in SOURCES) for d in datasets)


def is_video_dataset_config(raw: Mapping[str, Any]) -> bool:
    """musubi-tuner's layout with at least one video dataset."""
    return is_musubi_dataset_config(raw) and any(isinstance(d, dict) and ("video_directory" in d or
                                                 "video_jsonl_file" in d) for d in raw["datasets"])


def load_video_dataset_config(path: Path, warnings: list[str]) -> list[VideoDatasetSpec]:
    """The datasets of a musubi-tuner dataset TOML; ConfigError naming every key that cannot be honoured."""
    path = Path(path).expanduser()
    return video_dataset_specs(read_dataset_toml(path), path.parent, warnings, path.name)


def read_dataset_toml(path: Path) -> dict[str, Any]:
    """The tables of a dataset config file (sd-scripts' or musubi-tuner's); ConfigError naming dataset_config when
    it cannot be read or is not TOML."""
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as err:
        raise ConfigError([ConfigIssue(FIELD, f"cannot read {path}: {err.strerror or err}", "dataset")]) from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as err:
        raise ConfigError([ConfigIssue(FIELD, f"{path} is not valid TOML: {err}", "dataset")]) from None


def video_dataset_specs(raw: Mapping[str, Any], base: Path, warnings: list[str],
                        name: str = "dataset config") -> list[VideoDatasetSpec]:
    issues: list[str] = []
    unknown_top = sorted(set(raw) - {"general", "datasets"})
    if unknown_top:
        issues.append(f"unknown top-level key(s) {', '.join(unknown_top)}; a musubi-tuner dataset config has "
                      "[general] and [[datasets]]")
    general = _table(raw.get("general", {}), "[general]", GENERAL_KEYS, issues, warnings)
    datasets = raw.get("datasets", [])
    if not isinstance(datasets, list) or not datasets:
        issues.append("no [[datasets]]: add one with video_directory (a folder of clips) or image_directory")
        datasets = []
    specs = []
    for number, table in enumerate(datasets, 1):
        spec = _dataset(table, f"[[datasets]] #{number}", general, base, issues, warnings)
        if spec is not None:
            specs.append(spec)
    caches = [s.cache_directory or s.source for s in specs]
    if len(set(caches)) != len(caches):
        issues.append("two datasets share a cache directory (a dataset's folder when cache_directory is not set): "
                      "musubi-tuner refuses that too; give each its own cache_directory")
    if issues:
        raise ConfigError([ConfigIssue(FIELD, f"{name}: {message}", "dataset") for message in issues])
    return specs


def _dataset(table: Any, where: str, general: dict[str, Any], base: Path, issues: list[str],
             warnings: list[str]) -> VideoDatasetSpec | None:
    if not isinstance(table, dict):
        issues.append(f"{where} must be a table of key = value")
        return None
    if "subsets" in table:
        issues.append(f"{where}: [[datasets.subsets]] is sd-scripts' layout; a musubi-tuner dataset names its "
                      "folder itself (video_directory = ...)")
        return None
    own = _table(table, where, DATASET_KEYS, issues, warnings)
    sources = [k for k in SOURCES if k in own]
    if len(sources) != 1:
        issues.append(f"{where}: needs exactly one of {', '.join(SOURCES)}"
                      + (f" (got {', '.join(sources)})" if sources else ""))
        return None
    source = sources[0]
    is_image = source.startswith("image")
    if is_image:
        for key in VIDEO_KEYS:
            if key in own:
                warnings.append(f"dataset_config {where}: {key} does nothing in an image dataset (its images train "
                                "as 1-frame clips)")
    values = {**DEFAULTS, **general, **own}
    found = _find(own[source], base, directory=source.endswith("directory"))
    if found is None:
        issues.append(f"{where}: {source} not found: {own[source]} (relative paths are read from {base})")
        return None
    cache = None
    if "cache_directory" in own:
        cache = Path(own["cache_directory"]).expanduser()
        cache = cache if cache.is_absolute() else base / cache
    return VideoDatasetSpec(
        where, is_image, found if source.endswith("directory") else None,
        found if source.endswith("jsonl_file") else None, values["resolution"], values["enable_bucket"],
        values["bucket_no_upscale"], values["caption_extension"], values["batch_size"], values["num_repeats"],
        tuple(values["target_frames"]), values["frame_extraction"], values["frame_stride"], values["frame_sample"],
        values["max_frames"], values["source_fps"], cache)


def _table(table: Any, where: str, allowed: tuple[str, ...], issues: list[str], warnings: list[str]) -> dict[str, Any]:
    """One table's keys checked against musubi-tuner's types."""
    if not isinstance(table, dict):
        issues.append(f"{where} must be a table of key = value")
        return {}
    out: dict[str, Any] = {}
    for key, value in table.items():
        if key in IGNORED:
            warnings.append(f"dataset_config {where}: {key} (musubi-tuner) is ignored: {IGNORED[key]}")
        elif key in REFUSED:
            issues.append(f"{where}: {key} (musubi-tuner) is refused: {REFUSED[key]}")
        elif key not in allowed:
            issues.append(_misplaced(key, where, allowed))
        else:
            problem = _check(key, value)
            if problem:
                issues.append(f"{where}: {key}: {problem}")
            else:
                out[key] = _resolution(value) if key == "resolution" else value
    return out


def _check(key: str, value: Any) -> str:
    """What is wrong with one value, "" if nothing."""
    def whole(v: Any) -> bool:
        return isinstance(v, int) and not isinstance(v, bool) and v >= 1

    if key in ("batch_size", "num_repeats", "frame_stride", "frame_sample", "max_frames"):
        return "" if whole(value) else f"got {value!r}; expected a whole number >= 1"
    if key in ("enable_bucket", "bucket_no_upscale"):
        return "" if isinstance(value, bool) else f"got {value!r}; expected true or false"
    if key == "resolution":
        ok = whole(value) or (isinstance(value, list) and len(value) == 2 and all(whole(v) for v in value))
        return "" if ok else f"got {value!r}; expected a number or [width, height]"
    if key == "target_frames":
        ok = isinstance(value, list) and bool(value) and all(whole(v) for v in value)
        return "" if ok else f"got {value!r}; expected a list of frame counts >= 1, e.g. [1, 25, 45]"
    if key == "frame_extraction":
        if value == "chain":
            return "'chain' is not musubi-tuner's name: it is 'chunk' (N-frame pieces one after another)"
        return "" if value in EXTRACTIONS else f"got {value!r}; expected one of {', '.join(EXTRACTIONS)}"
    if key == "source_fps":
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0
        return "" if ok else f"got {value!r}; expected the clips' frame rate, e.g. 30.0"
    if key == "caption_extension":
        return "" if isinstance(value, str) and value.startswith(".") else f"got {value!r}; expected e.g. \".txt\""
    return "" if isinstance(value, str) and value.strip() else f"got {value!r}; expected a path (text)"


def _resolution(value: Any) -> tuple[int, int]:
    return (value, value) if isinstance(value, int) else (value[0], value[1])


def _find(name: str, base: Path, directory: bool) -> Path | None:
    p = Path(name).expanduser()
    for candidate in ([p] if p.is_absolute() else [base / p, p]):
        if candidate.is_dir() if directory else candidate.is_file():
            return candidate
    return None


def _misplaced(key: str, where: str, allowed: tuple[str, ...]) -> str:
    if key in DATASET_KEYS and key not in allowed:
        return f"{where}: {key} belongs to a [[datasets]] entry, not to [general] (as in musubi-tuner)"
    guess = closest(key, list(DATASET_KEYS) + list(REFUSED))
    return f"{where}: unknown key {key!r}" + (f"; did you mean {guess!r}?" if guess else "")


def read_jsonl(path: Path, is_image: bool) -> tuple[list[tuple[Path, str]], list[str]]:
    """(media path, caption) of each line of a musubi-tuner JSONL file ({"video_path": ..., "caption": ...}; for
    images "image_path"), and a line per unusable line. Relative media paths: from the file's folder, else the working
    directory."""
    key, items, problems = "image_path" if is_image else "video_path", [], []
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as err:
        return [], [f"{path}: cannot be read ({err})"]
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            data = json.loads(line)
        except json.JSONDecodeError as err:
            problems.append(f"{path} line {number}: not JSON ({err.msg})")
            continue
        media, caption = data.get(key) if isinstance(data, dict) else None, data.get("caption", "") \
            if isinstance(data, dict) else ""
        if not isinstance(media, str) or not isinstance(caption, str):
            problems.append(f"{path} line {number}: needs \"{key}\" and \"caption\" as text")
            continue
        p = Path(media).expanduser()
        if not p.is_absolute() and (path.parent / p).exists():
            p = path.parent / p
        items.append((p, caption.strip()))
    return items, problems
