"""The Dataset tab's pair view: for a dataset whose subsets name a control folder (an edit model's dataset:
`conditioning_data_dir` or `control_directory` in its dataset TOML), each target beside its control images and its
caption (the edit instruction), with what does not pair up listed first by name: targets without a control,
unreadable images (their pairs skipped), controls no target uses, targets with more references than any edit model
takes. The matching is trainers.data.edit_pairs', the one training uses. Torch-free.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from PIL import Image

from gui.text import plain
from gui.thumbnails import cached_thumbnail, small_copy
from trainers.data.edit_pairs import (
    EditPair,
    PairReport,
    control_folder,
    match_pairs,
    pair_issues,
    skipped_warnings,
)
from trainers.dataset_edit.folders import Concept, Dataset

MAX_REFERENCES = 3  # the most control images an edit model takes per target (Qwen-Image-Edit-Plus, FLUX.2)
MAX_PAIRS = 200  # pairs shown at once
GAP = 6  # pixels between the images of a pair


@dataclass
class PairView:
    reports: list[tuple[Concept, PairReport]]  # each subset with a control folder, and how its images pair up
    text: str  # the mismatches first, by name, then how many pairs
    rows: list[tuple[str, str]]  # (controls | target side by side, caption) of each pair shown


def control_dir(dataset: Dataset, concept: Concept, given: Path | None = None) -> Path | None:
    """The folder a concept's control images are in: `given` (a run's control_directory for a kohya folder or a
    flat one: for a kohya root its subfolder of the concept's name when there is one, as training reads it), else
    its subset's control_directory, else its conditioning_data_dir (which holds a masked_loss run's masks: the page
    cannot tell which the folder is for, so the pair view shows either)."""
    if given is not None:
        return control_folder(given, concept.folder, dataset.layout == "kohya")
    return concept.controls or concept.masks


def pair_view(dataset: Dataset, controls: Path | None = None, max_references: int = MAX_REFERENCES) -> PairView:
    """How the targets of each concept with a control folder (see control_dir) pair with their controls, as
    trainers.data.edit_pairs pairs them for training."""
    reports = [(concept, match_pairs([e.image for e in dataset.entries if e.concept == concept], folder,
                                     max_references, dataset.caption_extension))
               for concept in dataset.concepts if (folder := control_dir(dataset, concept, controls)) is not None]
    pairs = [pair for _, report in reports for pair in report.pairs][:MAX_PAIRS]
    rows = [(thumb, pair_caption(pair)) for pair in pairs if (thumb := pair_thumbnail(pair))]
    return PairView(reports, pair_text(reports, len(rows)), rows)


def pair_text(reports: list[tuple[Concept, PairReport]], shown: int) -> str:
    if not reports:
        return ("No control folder: give one above (a run's `control_directory`), or open a dataset .toml whose "
                "subsets have `control_directory` (or `conditioning_data_dir`): the folder of the images each edit "
                "starts from, named after their targets (`cat.png`, or `cat_0.png`, `cat_1.png` for several).")
    problems, counts = [], []
    for concept, report in reports:
        found = [issue.message for issue in pair_issues(report)] + skipped_warnings(report)
        problems += [f"- **{plain(concept.folder.name)}**: {plain(message)}" for message in found]
        counts.append(f"- {plain(concept.folder.name)}: {len(report.pairs)} pair(s) with controls from "
                      f"{plain(report.control_dir)}")
    head = (f"**{len(problems)} problem(s)** (fix these first):\n" + "\n".join(problems) if problems
            else "**Every target has its controls.**")
    total = sum(len(report.pairs) for _, report in reports)
    more = f" ({shown} shown)" if shown < total else ""
    return f"{head}\n\n**{total} pair(s)**{more}: control(s) | target, the caption below\n" + "\n".join(counts)


def pair_caption(pair: EditPair) -> str:
    names = ", ".join(control.name for control in pair.controls)
    return f"{names} → {pair.target.name}: {pair.caption or '(no caption)'}"


def pair_thumbnail(pair: EditPair) -> str | None:
    """The pair's control images then its target, side by side (each as the gallery's thumbnails are)."""
    def make() -> Image.Image:
        smalls = [small_copy(path) for path in (*pair.controls, pair.target)]
        height = max(small.height for small in smalls)
        row = Image.new("RGB", (sum(small.width for small in smalls) + GAP * (len(smalls) - 1), height),
                        (255, 255, 255))
        x = 0
        for small in smalls:
            row.paste(small, (x, (height - small.height) // 2))
            x += small.width + GAP
        return row
    return cached_thumbnail("pair", [*pair.controls, pair.target], make)
