"""Very large images decoded once: a copy scaled to what their bucket needs is kept in the user's cache and read
instead on every later draw. (A large JPEG decodes at a reduced scale directly and needs no copy.)

Without it a 10000x10000 PNG is decoded at full size each time it is drawn, making steps several times slower.
The copy's name hashes the file's path, size and modification time and the size needed, so an edited image or a
new bucket gets a new copy.
"""
from __future__ import annotations

import hashlib
import os
from pathlib import Path

OVERSIZE = 4  # an image at least this many times the size it is needed at (its shorter side) gets a copy


def cache_dir() -> Path:
    base = os.environ.get("ATELIER_CACHE") or Path.home() / ".cache" / "atelier"
    return Path(base) / "downscaled"


def wants_copy(size: tuple[int, int], min_side: int | None, image_format: str | None) -> bool:
    return bool(min_side) and image_format != "JPEG" and min(size) >= OVERSIZE * int(min_side)  # type: ignore[arg-type]


def copy_path(path: Path, min_side: int) -> Path:
    """Where the downscaled copy of `path` for `min_side` lives (it may not exist yet)."""
    stat = path.stat()
    key = f"{path.resolve()}|{stat.st_size}|{stat.st_mtime_ns}|{min_side}"
    return cache_dir() / f"{hashlib.sha1(key.encode('utf-8', 'surrogateescape')).hexdigest()}.png"


def scaled_size(size: tuple[int, int], min_side: int) -> tuple[int, int]:
    """`size` scaled down so its shorter side is `min_side` (the aspect ratio kept)."""
    scale = min_side / min(size)
    return max(min_side, round(size[0] * scale)), max(min_side, round(size[1] * scale))


def cover_size(w: int, h: int, width: int, height: int) -> tuple[int, int]:
    """The size ``(w, h)`` is resized to, keeping its aspect ratio, to just cover ``(width, height)``."""
    scale = max(width / w, height / h)
    return max(width, int(round(w * scale))), max(height, int(round(h * scale)))
