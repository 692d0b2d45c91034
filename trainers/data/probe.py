"""Cheap checks of image files before training: header, size and orientation, without decoding.

Torch-free (PIL only), so the preflight report and the GUI can call it. A file is decoded
only when its end marker is missing (a likely truncation), to tell a truncated file from a
good one with trailing bytes. Files that fail get a reason a user can act on.
"""
from __future__ import annotations

import os
import warnings
from pathlib import Path

from PIL import Image

ORIENTATION_TAG = 0x0112
_SWAPS_SIDES = {5, 6, 7, 8}  # EXIF orientations that rotate by 90 degrees
_PNG_END = b"\x00\x00\x00\x00IEND\xaeB`\x82"


class ImageSkipped(Exception):
    """An image file that cannot be trained on; `reason` says why in a few words."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def pixel_limit() -> int:
    """Images with more pixels are skipped: PIL's decompression-bomb limit (2 x MAX_IMAGE_PIXELS)."""
    return 2 * int(Image.MAX_IMAGE_PIXELS or 0) or 2**62


def probe_image(path: Path) -> tuple[int, int]:
    """(width, height) as the image will be seen, EXIF orientation applied; raise ImageSkipped if unusable."""
    path = Path(path)
    try:
        nbytes = os.stat(path).st_size
    except OSError as err:
        raise ImageSkipped(f"cannot be read ({err.strerror or err})") from None
    if nbytes == 0:
        raise ImageSkipped("empty file (0 bytes)")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            with Image.open(path) as im:
                width, height = im.size
                if width < 1 or height < 1:
                    raise ImageSkipped(f"has no pixels ({width}x{height})")
                if width * height > pixel_limit():
                    raise ImageSkipped(_too_large(width * height))
                orientation = _orientation(im)
                if not _ends_cleanly(path, im.format, nbytes):
                    im.load()  # a truncated file fails here; one with trailing bytes is fine
    except ImageSkipped:
        raise
    except Image.UnidentifiedImageError:
        raise ImageSkipped("not an image (unrecognised or corrupt header)") from None
    except Image.DecompressionBombError as err:
        raise ImageSkipped(f"too large ({err})") from None
    except PermissionError as err:
        raise ImageSkipped(f"cannot be read ({err.strerror or err})") from None
    except (OSError, SyntaxError, ValueError) as err:
        raise ImageSkipped(f"truncated or corrupt ({err})") from None
    return (height, width) if orientation in _SWAPS_SIDES else (width, height)


def _too_large(pixels: int) -> str:
    return (f"too large ({pixels / 1e6:.0f} megapixels; the limit is {pixel_limit() / 1e6:.0f}): "
            "downscale it, e.g. to 4096 pixels on the long side")


def _orientation(im: Image.Image) -> int:
    """EXIF orientation read from the header only (PNG's getexif would decode the image without it)."""
    if "exif" not in im.info and im.format != "JPEG":
        return 1
    try:
        return int(im.getexif().get(ORIENTATION_TAG, 1))
    except Exception:  # noqa: BLE001 - a malformed EXIF block: the image is used as stored
        return 1


def _ends_cleanly(path: Path, fmt: str | None, nbytes: int) -> bool:
    """Whether the file ends where its format says; False means it must be decoded to be trusted."""
    try:
        with open(path, "rb") as fh:
            if fmt == "WEBP":
                header = fh.read(8)
                return header[:4] == b"RIFF" and int.from_bytes(header[4:8], "little") + 8 <= nbytes
            fh.seek(max(0, nbytes - 1024))
            tail = fh.read()
    except OSError:
        return False
    if fmt == "PNG":
        return tail.endswith(_PNG_END)
    if fmt in ("JPEG", "MPO"):
        return b"\xff\xd9" in tail.rstrip(b"\x00\r\n ")[-2:]
    return False  # BMP and others: cheap enough to decode
