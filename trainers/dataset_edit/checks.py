"""Checks of a dataset before training: exact and near-duplicate images, images far below the training resolution,
and captions that are empty, shared by most images of a concept, over the text encoder's limit, or not plain UTF-8.
The sizes, buckets and token counts come from stats.dataset_stats; this module adds the perceptual hash. Torch-free.

A near duplicate is found by a difference hash (dHash): the image, EXIF orientation applied, shrunk to a 17x16 grey
thumbnail; each bit says whether a pixel is brighter than its right neighbour (256 bits). A resized, re-encoded or
slightly retouched copy keeps nearly every bit; two different pictures differ in about half of them.
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from PIL import Image, ImageOps

from trainers.dataset_edit.folders import Concept, Dataset, Entry
from trainers.dataset_edit.stats import DatasetStats, duplicate_groups

HASH_SIDE = 16  # 16 rows of 16 brightness steps: 256 bits
NEAR_BITS = 26  # at most this many of the 256 bits differ (10%) ...
NEAR_GREY = 8.0  # ... and the thumbnails, brightness centred, differ by at most this much (of 255) on average
FAR_BELOW = 2.0  # an image enlarged more than twice (a side under half its bucket's) is far below the resolution
MAX_LOOKS = 10_000  # images whose Look is kept in memory (about 1 KB each)
_POPCOUNT = np.array([bin(n).count("1") for n in range(256)], dtype=np.uint16)
_LOOKS: dict[tuple[str, int, int], Look | None] = {}  # (path, mtime, size) -> its Look


@dataclass(frozen=True)
class Look:
    """What an image looks like in small: its difference hash (32 bytes) and its 16x16 grey thumbnail, brightness
    centred on 0."""
    bits: np.ndarray
    grey: np.ndarray

    def alike(self, other: Look) -> bool:
        """Near duplicates: few hash bits differ and the thumbnails differ little on average. The second test keeps
        apart two different pictures on one flat background (a white studio backdrop), whose hashes differ only
        where their subjects lie."""
        return (hash_distance(self.bits, other.bits) <= NEAR_BITS
                and float(np.abs(self.grey - other.grey).mean()) <= NEAR_GREY)


def look_of(image: Path) -> Look | None:
    """The Look of `image`, EXIF orientation applied (None when it cannot be decoded); kept while the file's size
    and time stay, so checking a dataset again reads only the images changed since."""
    try:
        info = image.stat()
    except OSError:
        return None
    key = (str(image), info.st_mtime_ns, info.st_size)
    if key not in _LOOKS:
        if len(_LOOKS) >= MAX_LOOKS:
            _LOOKS.clear()
        _LOOKS[key] = _look(image)
    return _LOOKS[key]


def _look(image: Path) -> Look | None:
    try:
        with Image.open(image) as im:
            im.draft("L", (HASH_SIDE * 8, HASH_SIDE * 8))  # JPEG: decode at a fraction of the size, much faster
            grey = ImageOps.exif_transpose(im).convert("L")
            small = np.asarray(grey.resize((HASH_SIDE + 1, HASH_SIDE), Image.Resampling.BOX), dtype=np.float32)
    except (OSError, ValueError, SyntaxError, Image.DecompressionBombError):
        return None
    thumb = small[:, :HASH_SIDE]
    return Look(np.packbits(small[:, 1:] > small[:, :-1]), thumb - thumb.mean())


def hash_distance(a: np.ndarray, b: np.ndarray) -> int:
    """How many bits two difference hashes differ in."""
    return int(_POPCOUNT[np.bitwise_xor(a, b)].sum())


def near_duplicate_groups(entries: list[Entry], exact: Sequence[list[Entry]] = ()) -> list[list[Entry]]:
    """Groups of images that look alike (Look.alike) without all being byte-identical: each group of `exact`
    duplicates takes part through its first image only."""
    siblings = {id(e) for group in exact for e in group[1:]}
    looks = [(e, look) for e in entries if id(e) not in siblings and (look := look_of(e.image)) is not None]
    if len(looks) < 2:
        return []
    hashes = np.stack([look.bits for _, look in looks])
    parent = list(range(len(looks)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for i in range(len(looks) - 1):
        close = np.nonzero(_POPCOUNT[np.bitwise_xor(hashes[i + 1:], hashes[i])].sum(axis=1) <= NEAR_BITS)[0]
        for j in (int(j) for j in close + i + 1):
            if looks[i][1].alike(looks[j][1]):
                parent[root(j)] = root(i)
    groups: dict[int, list[Entry]] = {}
    for i, (entry, _) in enumerate(looks):
        groups.setdefault(root(i), []).append(entry)
    return [group for group in groups.values() if len(group) > 1]


def best_of(group: list[Entry]) -> Entry:
    """The image of a duplicate group that is kept: the most pixels, then the largest file, then the first name."""
    return min(group, key=lambda e: (-(e.size[0] * e.size[1] if e.size else 0), -e.image.stat().st_size,
                                     str(e.image)))


@dataclass
class SharedCaption:
    concept: Concept
    caption: str
    entries: list[Entry]
    of: int  # the concept's images


@dataclass
class DatasetChecks:
    exact: list[list[Entry]] = field(default_factory=list)  # byte-identical images
    near: list[list[Entry]] = field(default_factory=list)  # images that look alike (perceptual hash)
    far_below: list[tuple[Entry, tuple[int, int]]] = field(default_factory=list)  # enlarged more than FAR_BELOW
    empty: list[Entry] = field(default_factory=list)  # caption file blank, or none and no folder tokens
    shared: list[SharedCaption] = field(default_factory=list)  # one caption held by most images of a concept
    over_limit: list[tuple[Entry, int]] = field(default_factory=list)  # longer than the text encoder reads
    encoding: list[Entry] = field(default_factory=list)  # caption files that are not plain UTF-8

    @property
    def found(self) -> int:
        return sum(map(len, (self.exact, self.near, self.far_below, self.empty, self.shared, self.over_limit,
                             self.encoding)))


def far_below(stats: DatasetStats, factor: float = FAR_BELOW) -> list[tuple[Entry, tuple[int, int]]]:
    """The images training enlarges more than `factor` times to cover their bucket."""
    return [(e, (w, h)) for e, (w, h) in stats.upscaled if e.size and max(w / e.size[0], h / e.size[1]) > factor]


def empty_captions(dataset: Dataset) -> list[Entry]:
    """Images whose caption file is blank, or that have none and no folder tokens to train with."""
    return [e for e in dataset.readable if not e.caption.strip() and (e.has_caption or not e.concept.tokens.strip())]


def shared_captions(dataset: Dataset) -> list[SharedCaption]:
    """Per concept, a caption file text that more than half of its images (two at least) hold word for word."""
    found = []
    for concept in dataset.concepts:
        entries = [e for e in dataset.readable if e.concept == concept]
        counts = Counter(e.caption.strip() for e in entries if e.has_caption and e.caption.strip())
        if not counts:
            continue
        caption, count = counts.most_common(1)[0]
        if count >= 2 and count * 2 > len(entries):
            found.append(SharedCaption(concept, caption, [e for e in entries if e.caption.strip() == caption],
                                       len(entries)))
    return found


def dataset_checks(dataset: Dataset, stats: DatasetStats) -> DatasetChecks:
    """Everything worth fixing before a run at the resolution `stats` was computed for."""
    return DatasetChecks(exact=stats.duplicates, near=near_duplicate_groups(dataset.readable, stats.duplicates),
                         far_below=far_below(stats), empty=empty_captions(dataset), shared=shared_captions(dataset),
                         over_limit=stats.over_limit, encoding=[e for e in dataset.readable if e.encoding])


def duplicates_to_move(dataset: Dataset, near: bool = True) -> list[tuple[Entry, Entry]]:
    """(image set aside, the image kept in its stead): every exact duplicate but the first of its group and, with
    `near`, every near duplicate but the best (best_of) of its group."""
    exact = duplicate_groups(dataset.readable)
    moved = [(e, group[0]) for group in exact for e in group[1:]]
    if near:
        siblings = {id(group[0]): group[1:] for group in exact}
        for group in near_duplicate_groups(dataset.readable, exact):
            kept = best_of(group)
            for entry in (e for e in group if e is not kept):
                moved += [(entry, kept)] + [(sibling, kept) for sibling in siblings.get(id(entry), [])]
    moved = list({id(e): (e, k) for e, k in moved}.values())  # an exact sibling of a moved image once
    return sorted(moved, key=lambda pair: str(pair[0].image))
