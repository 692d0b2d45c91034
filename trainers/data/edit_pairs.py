"""Edit-pair datasets: each training image (the target, what the edit should give) with its control images (what
the edit starts from) and its caption (the edit instruction). Torch-free: the page's pair view reads it too.

A subset names its control folder as `conditioning_data_dir` (sd-scripts' key) or `control_directory`
(musubi-tuner's). A target's controls are found by file stem, as musubi-tuner finds them:

    images/cat.jpg       controls/cat.png                        one control (any image extension)
    images/cat.jpg       controls/cat_0.png, controls/cat_1.png  several, in the order of the number after `_`
                                                                 (`cat_0000.png` works too)

A control named exactly after its target comes first. Longer target names claim their controls first, so
`cat_1.jpg`'s own `cat_1.png` is never taken as the second reference of `cat.jpg`.
"""
from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainers.core.errors import ConfigIssue
from trainers.data.kohya_folders import IMAGE_EXTENSIONS, normalize_caption_extension
from trainers.data.probe import ImageSkipped, probe_image
from trainers.data.text_files import decode_caption

FIELD = "conditioning_data_dir"
SIZING_OPTIONS = ("no_resize_control", "control_resolution")  # musubi-tuner's, with its meaning
KEYS = ("conditioning_data_dir", "control_directory")  # sd-scripts' and musubi-tuner's name of the control folder
LISTED = 20  # names listed in one message


@dataclass(frozen=True)
class ControlSizing:
    """How a subset's controls are sized (musubi-tuner's options). By default each is fitted to its target's bucket
    as the target is; `own_size` (no_resize_control) keeps the control's size, cut down to a multiple of the model's
    step; `area` (control_resolution, width x height) resizes it to that many pixels at its own aspect ratio, and
    with `own_size` only shrinks a control larger than that."""

    own_size: bool = False
    area: tuple[int, int] | None = None

    @property
    def fitted_to_target(self) -> bool:
        return not self.own_size and self.area is None


def control_size(sizing: ControlSizing, size: tuple[int, int], step: int) -> tuple[int, int]:
    """The (width, height) a control of `size` trains at when it keeps its own aspect ratio (not fitted_to_target)."""
    width, height = size
    if sizing.area is not None and (not sizing.own_size or width * height > sizing.area[0] * sizing.area[1]):
        return _area_size(size, sizing.area[0] * sizing.area[1], step)
    return max(step, width - width % step), max(step, height - height % step)


def _area_size(size: tuple[int, int], area: int, step: int) -> tuple[int, int]:
    """Multiples of `step` of about `area` pixels with the aspect ratio nearest `size`'s (as musubi-tuner's
    calculate_bucket_resolution picks among the widths around the exact one)."""
    aspect = size[0] / size[1]
    exact = max(step, int((area * aspect) ** 0.5) // step * step)
    candidates = [(w, max(step, area // w // step * step)) for w in range(exact - 2 * step, exact + 3 * step, step)
                  if w >= step]
    return min(candidates, key=lambda c: abs(c[0] / c[1] - aspect))


def sizing_from_values(values: Mapping[str, Any]) -> ControlSizing:
    """A config's (or subset's) no_resize_control and control_resolution; ValueError naming a bad resolution."""
    from trainers.core.options.validation import parse_resolution

    text = str(values.get("control_resolution") or "").strip()
    try:
        area = parse_resolution(text) if text else None
    except ValueError as err:
        raise ValueError(f"control_resolution: {err}") from None
    return ControlSizing(bool(values.get("no_resize_control")), area)


def sizing_refusals(values: Mapping[str, Any], controls: int | None) -> list[ConfigIssue]:
    """no_resize_control / control_resolution set for a model known to take no control images (`controls`, the
    model's count: trainers/models/edit_rules.py `takes_controls`), each named."""
    if controls != 0:
        return []
    return [ConfigIssue(name, "sizes an edit model's control images; this model takes none: clear it", "loss")
            for name in SIZING_OPTIONS if values.get(name)]


@dataclass(frozen=True)
class EditPair:
    target: Path
    controls: tuple[Path, ...]  # in reference order
    caption: str  # the edit instruction ("" without a caption file)


@dataclass(frozen=True)
class PairReport:
    pairs: list[EditPair]  # every target with its controls, all readable (more controls than allowed included)
    missing: list[Path]  # targets without a control
    unreadable: list[tuple[Path, str]]  # (image, why): its pair is skipped
    unused_controls: list[Path]  # control images that match no target
    control_dir: Path | None = None
    max_controls: int = 1
    folder_exists: bool = True

    @property
    def too_many(self) -> list[EditPair]:
        """Pairs with more controls than the model takes."""
        return [pair for pair in self.pairs if len(pair.controls) > self.max_controls]


def match_pairs(targets: Sequence[Path], control_dir: Path, max_controls: int,
                caption_extension: str = ".txt") -> PairReport:
    """Each target's controls in `control_dir` (see the module's doc) and caption (beside the target)."""
    control_dir = Path(control_dir).expanduser()
    names = _image_names(control_dir)
    unclaimed = set(names)
    found: dict[Path, tuple[Path, ...]] = {}
    for target in sorted(targets, key=lambda p: len(p.name), reverse=True):
        stem = os.path.splitext(target.name)[0]
        own = [name for name in unclaimed if _control_rank(stem, name) is not None]
        unclaimed.difference_update(own)
        if own:
            found[target] = tuple(control_dir / name for name in sorted(own, key=lambda n: _control_rank(stem, n)))
    pairs, missing, unreadable = [], [], []
    for target in targets:
        controls = found.get(target)
        if controls is None:
            missing.append(target)
            continue
        problems = [(path, why) for path in (target, *controls) if (why := _unreadable(path))]
        unreadable += problems
        if not problems:
            pairs.append(EditPair(target, controls, read_caption(target, caption_extension)))
    return PairReport(pairs, missing, unreadable, [control_dir / name for name in sorted(unclaimed)], control_dir,
                      max_controls, control_dir.is_dir())


def pair_issues(report: PairReport, field: str = FIELD, group: str = "dataset") -> list[ConfigIssue]:
    """What keeps a report's pairs from training, each naming the files and how to fix them."""
    where = report.control_dir
    if not report.folder_exists:
        return [ConfigIssue(field, f"the control folder {where} does not exist: set {field} (or a subset's "
                                   "control_directory) to the folder of the images each edit starts from", group)]
    issues = []
    if report.missing:
        issues.append(ConfigIssue(field, f"{len(report.missing)} target image(s) have no control image in {where}: "
                                         f"{_listed(report.missing)}. Put each target's starting image there with "
                                         "the target's file name (any image extension), e.g. "
                                         f"{report.missing[0].stem}.png", group))
    if report.too_many:
        limit = report.max_controls
        names = "stem.png" if limit == 1 else f"stem_0.png ... stem_{limit - 1}.png"
        issues.append(ConfigIssue(field, f"{len(report.too_many)} target image(s) have more control images than "
                                         f"the model takes ({limit}): {_listed([p.target for p in report.too_many])}."
                                         f" Keep at most {limit} per target ({names})", group))
    return issues


def control_folder(controls: Path, subset_folder: Path, kohya_root: bool) -> Path:
    """Where a subset's controls are: for a kohya root the subfolder of the same name when there is one (as
    sd-scripts lays out conditioning_data_dir), else the control folder itself."""
    own = controls / subset_folder.name
    return own if kohya_root and own.is_dir() else controls


def option_of(values: Mapping[str, Any]) -> str:
    """The option that names a flat config's control folder."""
    return "control_directory" if str(values.get("control_directory") or "").strip() else FIELD


def skipped_warnings(report: PairReport) -> list[str]:
    """The pairs left out because an image of theirs cannot be read, and controls no target uses."""
    notes = [f"{path}: {why}; its pair is skipped" for path, why in report.unreadable]
    if report.unused_controls:
        notes.append(f"{report.control_dir}: {len(report.unused_controls)} control image(s) match no target and are "
                     f"not used: {_listed(report.unused_controls)}")
    return notes


def read_caption(target: Path, caption_extension: str = ".txt") -> str:
    path = target.with_suffix(normalize_caption_extension(caption_extension))
    try:
        text = decode_caption(path.read_bytes()).text
    except OSError:
        return ""
    return (text or "").strip()


def _control_rank(stem: str, name: str) -> int | None:
    """0 for the control named exactly after `stem`, 1 + n for `stem_n`; None if `name` is not stem's control."""
    own = os.path.splitext(name)[0]
    if own == stem:
        return 0
    prefix, _, number = own.rpartition("_")
    return int(number) + 1 if prefix == stem and number.isdigit() else None


def _image_names(folder: Path) -> list[str]:
    try:
        return [entry.name for entry in os.scandir(folder)
                if entry.is_file() and os.path.splitext(entry.name)[1].lower() in IMAGE_EXTENSIONS]
    except OSError:
        return []


def _unreadable(path: Path) -> str:
    try:
        probe_image(path)
    except ImageSkipped as skipped:
        return skipped.reason
    return ""


def _listed(paths: Sequence[Path]) -> str:
    names = ", ".join(path.name for path in paths[:LISTED])
    return names + (f" (and {len(paths) - LISTED} more)" if len(paths) > LISTED else "")
