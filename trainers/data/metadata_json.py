"""Metadata JSON datasets: a folder tree of JSON files, one per image, with filters and tag transforms.

Each ``*.json`` file holds at least::

    {"path": "images/0001.jpg", "tags": ["1girl", "long hair", "smile"], "score": 7.5}

(other keys are ignored). ``path`` is absolute, or relative to the JSON file's folder (else to
``metadata_dir``). Every file dropped is counted under the first reason that drops it.
Torch-free; stdlib only.
"""
from __future__ import annotations

import json
import math
import os
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from trainers.data.text_files import decode_text

NOT_NTH = "not every n-th file (metadata_consider_every_nth)"
BAD_JSON = "unreadable or invalid JSON"
BAD_FIELDS = "no usable path, tags list or numeric score"
NOT_FOUND = "image file not found"
BELOW_ABS = "score below metadata_abs_min_score"
BLACKLISTED = "has a blacklisted tag (metadata_blacklist_tags)"
BELOW_MIN = "score below metadata_min_score after tag bonuses"


@dataclass(frozen=True)
class MetadataFilters:
    abs_min_score: float | None = None
    min_score: float | None = None
    tag_bonus: tuple[tuple[str, float], ...] = ()
    blacklist: frozenset[str] = frozenset()
    remove: frozenset[str] = frozenset()
    replacements: tuple[tuple[str, str], ...] = ()
    separator: str = ", "
    score_tags: tuple[tuple[float, str], ...] = ()  # (threshold, as written), ascending
    consider_every_nth: int = 1


def parse_tag_bonus(entries: list[str]) -> tuple[tuple[str, float], ...]:
    """["masterpiece=2", "sketch=-1.5"] -> (("masterpiece", 2.0), ("sketch", -1.5))."""
    out = []
    for entry in entries:
        tag, sep, number = entry.rpartition("=")
        try:
            value = float(number)
        except ValueError:
            value = math.nan
        if not sep or not tag.strip() or not math.isfinite(value):
            raise ValueError(f"{entry!r} is not 'tag=number', e.g. 'masterpiece=2' or 'sketch=-1'")
        out.append((tag.strip(), value))
    return tuple(out)


def parse_replacements(entries: list[str]) -> tuple[tuple[str, str], ...]:
    """[":->=", " ->_"] -> ((":", "="), (" ", "_")). Spaces count; the new text may be empty."""
    out = []
    for entry in entries:
        old, sep, new = entry.partition("->")
        if not sep or not old:
            raise ValueError(f"{entry!r} is not 'old->new', e.g. ' ->_' (space to underscore) or ':->='")
        out.append((old, new))
    return tuple(out)


def parse_score_tags(entries: list[str]) -> tuple[tuple[float, str], ...]:
    """["5", "7", "9"] -> thresholds; an image scoring 8 gets the tag 'scr7'."""
    out = []
    for entry in entries:
        try:
            value = float(entry)
        except ValueError:
            raise ValueError(f"{entry!r} is not a number; list score thresholds, e.g. [5, 7, 9]") from None
        out.append((value, entry.strip()))
    return tuple(sorted(out))


@dataclass
class MetadataRecord:
    image: Path
    tags: list[str]  # caption tags, transformed, score tag first
    score: float
    source: Path  # the JSON file


@dataclass
class MetadataScan:
    root: Path
    records: list[MetadataRecord] = field(default_factory=list)
    files: int = 0
    dropped: Counter = field(default_factory=Counter)


def scan_metadata_dir(root: Path, filters: MetadataFilters) -> MetadataScan:
    root = Path(root).expanduser()
    paths = sorted(p for p in _json_files(root))
    scan = MetadataScan(root, files=len(paths))
    for position, path in enumerate(paths):
        if position % filters.consider_every_nth:
            scan.dropped[NOT_NTH] += 1
            continue
        reason, record = _read_record(path, root, filters)
        if reason:
            scan.dropped[reason] += 1
        else:
            scan.records.append(record)
    return scan


def _json_files(root: Path) -> list[Path]:
    found = []
    for folder, dirs, files in os.walk(root, onerror=lambda err: None):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        found += [Path(folder) / f for f in files if f.lower().endswith(".json") and not f.startswith(".")]
    return found


def _read_record(path: Path, root: Path, filters: MetadataFilters) -> tuple[str, MetadataRecord | None]:
    try:
        data = json.loads(decode_text(path.read_bytes()))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return BAD_JSON, None
    if not isinstance(data, dict):
        return BAD_FIELDS, None
    image, tags, score = data.get("path"), data.get("tags"), data.get("score")
    if (not isinstance(image, str) or not image.strip() or not isinstance(tags, list)
            or not all(isinstance(t, str) for t in tags) or isinstance(score, bool)
            or not isinstance(score, (int, float)) or not math.isfinite(score)):
        return BAD_FIELDS, None
    image_path = _resolve(image.strip(), path.parent, root)
    if image_path is None:
        return NOT_FOUND, None
    raw = [t.strip() for t in tags if t.strip()]
    pairs = [(t, _replace(t, filters.replacements)) for t in raw]
    if filters.abs_min_score is not None and score < filters.abs_min_score:
        return BELOW_ABS, None
    if any(_matches(pair, filters.blacklist) for pair in pairs):
        return BLACKLISTED, None
    bonus = sum(value for tag, value in filters.tag_bonus if any(tag in pair for pair in pairs))
    if filters.min_score is not None and score + bonus < filters.min_score:
        return BELOW_MIN, None
    caption_tags = [new for old, new in pairs if not _matches((old, new), filters.remove) and new]
    passed = [text for threshold, text in filters.score_tags if score >= threshold]
    if passed:
        caption_tags.insert(0, f"scr{passed[-1]}")
    return "", MetadataRecord(image_path, caption_tags, float(score), path)


def _resolve(image: str, folder: Path, root: Path) -> Path | None:
    candidate = Path(image).expanduser()
    for p in ([candidate] if candidate.is_absolute() else [folder / candidate, root / candidate]):
        if p.is_file():
            return p
    return None


def _replace(tag: str, replacements: tuple[tuple[str, str], ...]) -> str:
    for old, new in replacements:
        tag = tag.replace(old, new)
    return tag


def _matches(pair: tuple[str, str], names: frozenset[str]) -> bool:
    """A filter names a tag as written in the JSON or as it reads after the replacements."""
    return pair[0] in names or pair[1] in names
