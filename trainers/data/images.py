"""Image loading and preprocessing for training.

``load_image_rgb`` gives an upright RGB PIL image (EXIF orientation applied,
transparency composited onto white).  ``prepare_image`` resizes it to cover a
target size, crops (center or random), optionally flips, and returns a
``(3, H, W)`` float tensor in ``[-1, 1]`` plus the SDXL size-conditioning
values (original size, crop top-left, target size), and, given a loss mask
(``load_mask``, or an image's alpha channel kept by ``load_image(keep_alpha=True)``),
that mask resized, cropped and flipped the same way. ``color_jitter`` is sd-scripts' ``color_aug``.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from PIL import Image, ImageOps

from trainers.core.errors import BadInput
from trainers.core.fsio import atomic_path
from trainers.data import downscale
from trainers.data.downscale import cover_size

__all__ = ["ImageLoadError", "PreparedImage", "alpha_of", "color_jitter", "cover_size", "load_image",
           "load_image_rgb", "load_mask", "to_rgb", "prepare_image"]


class ImageLoadError(BadInput):
    """An image file could not be opened or decoded. ``path`` holds the file."""

    def __init__(self, path: Path, reason: str):
        self.path = Path(path)
        self.reason = reason
        super().__init__(f"could not load image {self.path}: {reason}")


_TRANSPARENT_MODES = {"RGBA", "LA", "PA", "RGBa", "La"}


def to_rgb(img: Image.Image, background: tuple[int, int, int] = (255, 255, 255)) -> Image.Image:
    """Convert any PIL image to 8-bit RGB; transparent pixels are composited onto ``background``."""
    has_alpha = img.mode in _TRANSPARENT_MODES or "transparency" in img.info
    if img.mode == "RGB" and not has_alpha:
        return img
    if img.mode in ("I;16", "I;16L", "I;16B", "I;16N", "I"):
        # 16/32-bit greyscale: PIL's convert() would clip at 255, so rescale to 8 bits.
        arr = np.asarray(img).astype(np.float64)
        peak = 65535.0 if img.mode.startswith("I;16") or arr.max(initial=0) > 255 else 255.0
        arr = np.clip(np.rint(arr * (255.0 / peak)), 0, 255).astype(np.uint8)
        return Image.fromarray(arr, mode="L").convert("RGB")
    if img.mode == "F":
        arr = np.asarray(img)
        arr = np.clip(np.rint(arr * 255.0 if arr.max(initial=0) <= 1.0 else arr), 0, 255).astype(np.uint8)
        return Image.fromarray(arr, mode="L").convert("RGB")
    if has_alpha:
        rgba = img.convert("RGBA")
        canvas = Image.new("RGBA", rgba.size, background + (255,))
        canvas.alpha_composite(rgba)
        return canvas.convert("RGB")
    return img.convert("RGB")


def has_alpha(img: Image.Image) -> bool:
    return img.mode in _TRANSPARENT_MODES or "transparency" in img.info


def load_image(path: Path, min_side: int | None = None, keep_alpha: bool = False) -> Image.Image:
    """Open ``path`` fully, apply EXIF orientation and convert to RGB (transparency -> white), or to
    RGBA when ``keep_alpha`` and the image has transparency (``prepare_image`` composites it then).

    ``min_side``: the smallest side the caller needs; a JPEG much larger than that is decoded at
    a reduced scale (still at least ``min_side`` on both sides), which is far faster for photos.
    Raises :class:`ImageLoadError` (a ``ValueError``) naming the file on any failure
    (missing, not an image, truncated, decompression bomb, ...).
    """
    path = Path(path)
    try:
        with warnings.catch_warnings(), Image.open(path) as im:
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            copy = downscale.copy_path(path, min_side) if downscale.wants_copy(im.size, min_side, im.format) else None
            if copy is not None and copy.is_file():
                return load_image(copy, keep_alpha=keep_alpha)  # decoded in full once, read small ever after
            if min_side and im.format == "JPEG" and min(im.size) >= 2 * min_side:
                im.draft("RGB", (min_side, min_side))
            im.load()
            try:
                upright = ImageOps.exif_transpose(im)  # a new image, detached from the file
            except Exception:  # malformed EXIF block: keep the pixels as stored
                upright = im.copy()
        if copy is not None and min_side:
            upright = upright.resize(downscale.scaled_size(upright.size, min_side), Image.Resampling.LANCZOS)
            _keep(upright, copy)
        if keep_alpha and has_alpha(upright):
            return upright.convert("RGBA")
        return to_rgb(upright)
    except FileNotFoundError as e:
        raise ImageLoadError(path, "file not found") from e
    except Image.UnidentifiedImageError as e:
        raise ImageLoadError(path, "not a recognised image format (corrupt or not an image)") from e
    except Image.DecompressionBombError as e:
        raise ImageLoadError(path, f"image too large ({e})") from e
    except Exception as e:  # truncated data, broken chunks, bad EXIF, ...
        raise ImageLoadError(path, f"{type(e).__name__}: {e}") from e


def _keep(image: Image.Image, copy: Path) -> None:
    """Write the downscaled copy; a cache that cannot be written only costs speed."""
    try:
        with atomic_path(copy, durable=False) as tmp:
            image.save(tmp, format="PNG", compress_level=1)
    except OSError:
        pass


def load_image_rgb(path: Path, min_side: int | None = None) -> Image.Image:
    """``load_image`` without alpha: an upright RGB image, transparency composited onto white."""
    return load_image(path, min_side)


def load_mask(path: Path) -> Image.Image:
    """A loss-mask image as 8-bit grey: its red channel (as sd-scripts reads masked_loss masks)."""
    return load_image(path).getchannel("R")


def alpha_of(img: Image.Image) -> Image.Image | None:
    """The alpha channel of an RGBA image as a mask (255 = opaque), None for an image without one."""
    return img.getchannel("A") if img.mode == "RGBA" else None


@dataclass
class PreparedImage:
    pixels: torch.Tensor  # (3, H, W) float32 in [-1, 1]
    original_size: tuple[int, int]  # (h, w) of the image passed in, before resizing
    crop_top_left: tuple[int, int]  # (top, left) of the crop in the resized (and, if flipped, flipped) image
    target_size: tuple[int, int]  # (h, w) == (height, width)
    flipped: bool = False
    mask: torch.Tensor | None = None  # (1, H, W) float32 in [0, 1]: the loss weight of each pixel


def _check_size(name: str, value: int) -> int:
    if isinstance(value, bool) or int(value) != value or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return int(value)


def prepare_image(
    img: Image.Image,
    width: int,
    height: int,
    random_crop: bool = False,
    generator: torch.Generator | None = None,
    flip: bool = False,
    original_size: tuple[int, int] | None = None,
    mask: Image.Image | None = None,
) -> PreparedImage:
    """Resize ``img`` to cover ``(width, height)`` keeping its aspect ratio, crop, optionally flip.

    * Resampling: LANCZOS when shrinking, BICUBIC when enlarging; no resize if already covering exactly.
    * Crop: centered (``(excess) // 2``, like kohya) or uniform random with ``generator`` when
      ``random_crop`` (``torch``'s default RNG if ``generator`` is None).
    * SDXL conditioning follows diffusers' ``train_text_to_image_sdxl.py``: ``original_size`` is the
      input size, ``crop_top_left`` is in the resized image's pixels; with ``flip`` the crop is
      reported in the flipped image's frame (``left = resized_w - left - width``), i.e. as if the
      image had been flipped before cropping.
    * ``original_size`` (h, w) overrides the reported original size, for an image decoded at a
      reduced scale (see ``load_image_rgb``'s ``min_side``).
    * ``mask``: a grey-scale loss mask of the image (stretched to its size if it differs, e.g. for a
      JPEG decoded at a reduced scale), resized, cropped and flipped with it.
    """
    width = _check_size("width", width)
    height = _check_size("height", height)
    img = to_rgb(img)
    w, h = img.size
    if w < 1 or h < 1:
        raise ValueError(f"cannot prepare an empty image of size {w}x{h}")
    if mask is not None:
        mask = mask if mask.mode == "L" else mask.convert("L")
        if mask.size != (w, h):
            mask = mask.resize((w, h), resample=Image.Resampling.LANCZOS)

    new_w, new_h = cover_size(w, h, width, height)
    scale = max(width / w, height / h)
    if (new_w, new_h) != (w, h):
        resample = Image.Resampling.LANCZOS if scale < 1.0 else Image.Resampling.BICUBIC
        img = img.resize((new_w, new_h), resample=resample)
        if mask is not None:
            mask = mask.resize((new_w, new_h), resample=resample)

    excess_x, excess_y = new_w - width, new_h - height
    if random_crop:
        top = int(torch.randint(0, excess_y + 1, (1,), generator=generator).item()) if excess_y else 0
        left = int(torch.randint(0, excess_x + 1, (1,), generator=generator).item()) if excess_x else 0
    else:
        top, left = excess_y // 2, excess_x // 2

    arr = np.asarray(img, dtype=np.uint8)[top : top + height, left : left + width]
    weights = None
    if mask is not None:
        weights = np.asarray(mask, dtype=np.uint8)[top : top + height, left : left + width]
    if flip:
        arr = arr[:, ::-1]
        weights = None if weights is None else weights[:, ::-1]
        left = new_w - left - width
    # float32 copy (writable, C-contiguous) -> (3, H, W) in [-1, 1]
    pixels = torch.from_numpy(np.ascontiguousarray(arr, dtype=np.float32)).permute(2, 0, 1)
    pixels = (pixels / 127.5 - 1.0).contiguous()
    if weights is not None:
        weights = torch.from_numpy(np.ascontiguousarray(weights, dtype=np.float32))[None] / 255.0

    return PreparedImage(
        pixels=pixels,
        original_size=original_size or (h, w),
        crop_top_left=(top, left),
        target_size=(height, width),
        flipped=bool(flip),
        mask=weights,
    )


HUE_SHIFT = 8.0  # sd-scripts' hue limit, in OpenCV units (180 a turn): up to 16 degrees either way


def color_jitter(pixels: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """sd-scripts' color_aug on a prepared image ((3, H, W) in [-1, 1]): a third of the time, either a hue
    shift of up to 16 degrees or a gamma of 0.95-1.05 (half each). The draws come from ``generator``.

    The gamma applies to values in [0, 1], as albumentations' RandomGamma (which sd-scripts replaced with
    code that raises 0-255 values to it, a far larger change of brightness)."""
    apply, hue, amount = torch.rand(3, generator=generator, dtype=torch.float64).tolist()
    if apply > 0.33:
        return pixels
    arr = ((pixels + 1.0) * 127.5).round().clamp(0, 255).to(torch.uint8).permute(1, 2, 0).numpy()
    if hue > 0.5:
        hsv = np.array(Image.fromarray(arr, mode="RGB").convert("HSV"))
        shift = (amount * 2 - 1) * HUE_SHIFT * 256 / 180  # PIL's hue has 256 steps a turn
        hsv[..., 0] = np.mod(np.round(hsv[..., 0] + shift), 256).astype(np.uint8)
        out = np.asarray(Image.fromarray(hsv, mode="HSV").convert("RGB"))
    else:
        gamma = 0.95 + amount * 0.1
        out = np.clip(np.round(255.0 * (arr / 255.0) ** gamma), 0, 255).astype(np.uint8)
    jittered = torch.from_numpy(np.ascontiguousarray(out, dtype=np.float32)).permute(2, 0, 1)
    return (jittered / 127.5 - 1.0).contiguous()
