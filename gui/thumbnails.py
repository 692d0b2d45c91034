"""The small copies of dataset images the Dataset tab shows, made in a temp folder (the page serves files from the
temp and runs folders only) once per version of the files they show, and pruned by age and total size."""
from __future__ import annotations

import hashlib
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from PIL import Image, ImageOps

from trainers.dataset_edit.clip_view import poster_frame

THUMBS = Path(tempfile.gettempdir()) / "atelier-thumbs"
THUMB_SIDE = 256
THUMBS_MAX_BYTES = 256 * 2**20  # the thumbnails kept, least recently shown removed first
THUMBS_MAX_AGE_S = 14 * 86400  # and none not shown for longer


def thumbnail(image: Path, mask: Path | None = None) -> str | None:
    """A small copy of `image` in the temp folder (made once per version of the image and its mask), with what the
    mask leaves out of the loss tinted red; None when the image cannot be read."""
    def make() -> Image.Image:
        small = small_copy(image)
        return small if mask is None else _overlay(small, mask)
    return cached_thumbnail("image", [image, *([mask] if mask else [])], make)


def clip_thumbnail(clip: Path) -> str | None:
    """A small copy of a video clip's first frame (its poster); None when the clip does not decode."""
    def make() -> Image.Image:
        poster = poster_frame(clip)
        poster.thumbnail((THUMB_SIDE, THUMB_SIDE))
        return poster
    return cached_thumbnail("poster", [clip], make)


def small_copy(image: Path, side: int = THUMB_SIDE) -> Image.Image:
    """`image` as trained (EXIF orientation applied, RGB), at most `side` pixels wide and high."""
    with Image.open(image) as im:
        small = ImageOps.exif_transpose(im).convert("RGB")
    small.thumbnail((side, side))
    return small


def cached_thumbnail(kind: str, sources: list[Path], make: Callable[[], Image.Image]) -> str | None:
    """The thumbnail `make()` draws from `sources`, saved in the temp folder once per version of those files (and
    `kind` of drawing); None when a source cannot be read."""
    try:
        versions = [kind] + [f"{path}\0{info.st_size}\0{info.st_mtime_ns}" for path in sources
                             for info in [path.stat()]]
        thumb = THUMBS / f"{hashlib.sha1(chr(1).join(versions).encode()).hexdigest()}.webp"
        if thumb.exists():
            thumb.touch()  # shown now: pruned last
            return str(thumb)
        drawn = make()
        THUMBS.mkdir(parents=True, exist_ok=True)
        drawn.save(thumb, quality=85)
    except (OSError, ValueError, Image.DecompressionBombError):
        return None
    return str(thumb)


def _overlay(small: Image.Image, mask: Path) -> Image.Image:
    """`small` tinted red where the mask is dark (left out of the loss), in proportion to how dark."""
    with Image.open(mask) as m:
        kept = m.convert("L").resize(small.size)
    left_out = kept.point(lambda v: (255 - v) * 6 // 10)  # at most 60% red: the image stays readable
    return Image.composite(Image.new("RGB", small.size, (230, 30, 30)), small, left_out)


def prune_thumbnails(max_bytes: int = THUMBS_MAX_BYTES, max_age_s: float = THUMBS_MAX_AGE_S) -> int:
    """Remove the thumbnails not shown for `max_age_s`, then the least recently shown until they take `max_bytes`
    at most; returns how many were removed."""
    try:
        thumbs = sorted((entry.stat().st_mtime, entry.stat().st_size, Path(entry.path))
                        for entry in os.scandir(THUMBS) if entry.name.endswith(".webp"))
    except OSError:  # no thumbnails yet
        return 0
    too_old = time.time() - max_age_s
    kept = sum(size for _, size, _ in thumbs)
    removed = 0
    for shown, size, path in thumbs:  # the least recently shown first
        if shown >= too_old and kept <= max_bytes:
            break
        path.unlink(missing_ok=True)
        kept -= size
        removed += 1
    return removed
