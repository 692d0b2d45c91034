"""Small generated image files for the dataset tests: good ones of any shape, and every kind of bad one."""
from __future__ import annotations

import io
import struct
import zlib
from pathlib import Path

import numpy as np
from PIL import Image


def save_image(path: Path, size: tuple[int, int], mode: str = "RGB", seed: int = 0, **save_kw) -> Path:
    """A noisy image (so it compresses like a photo) of `size` (width, height)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    w, h = size
    arr = np.random.default_rng(seed).integers(0, 255, (h, w, 3), dtype=np.uint8)
    img = Image.fromarray(arr)
    if mode != "RGB":
        img = img.convert(mode)
    img.save(path, **save_kw)
    return path


def png16_rgb_bytes(w: int, h: int) -> bytes:
    """A 48-bit (16 bits a channel) RGB PNG, which PIL cannot write itself."""
    rows = np.random.default_rng(1).integers(0, 65535, (h, w, 3), dtype=np.uint16).astype(">u2")
    raw = b"".join(b"\x00" + row.tobytes() for row in rows)

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    header = struct.pack(">IIBBBBB", w, h, 16, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b"")


def corrupt_middle_png(path: Path, size: tuple[int, int] = (64, 64)) -> Path:
    """A PNG whose header and end are intact but whose pixel data is broken: passes the cheap
    checks, fails when decoded (mid-epoch)."""
    buf = io.BytesIO()
    Image.fromarray(np.random.default_rng(2).integers(0, 255, (size[1], size[0], 3), dtype=np.uint8)).save(buf, "PNG")
    data = bytearray(buf.getvalue())
    data[100:160] = b"\x00" * 60
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(bytes(data))
    return path


def bad_and_odd_files(folder: Path, only: set[str] | None = None) -> dict[str, Path]:
    """Every kind of file real datasets hold (or `only` those): name -> path. Keys 'bad_*' must be skipped."""
    folder.mkdir(parents=True, exist_ok=True)
    files: dict[str, Path] = {}
    jpeg = io.BytesIO()
    Image.fromarray(np.random.default_rng(3).integers(0, 255, (96, 96, 3), dtype=np.uint8)).save(jpeg, "JPEG")
    files["bad_truncated_jpeg"] = folder / "truncated.jpg"
    files["bad_truncated_jpeg"].write_bytes(jpeg.getvalue()[: len(jpeg.getvalue()) // 2])
    png = io.BytesIO()
    Image.fromarray(np.random.default_rng(4).integers(0, 255, (96, 96, 3), dtype=np.uint8)).save(png, "PNG")
    files["bad_truncated_png"] = folder / "truncated.png"
    files["bad_truncated_png"].write_bytes(png.getvalue()[: len(png.getvalue()) // 2])
    files["bad_zero_bytes"] = folder / "empty.png"
    files["bad_zero_bytes"].write_bytes(b"")
    files["bad_not_an_image"] = folder / "notes.jpg"
    files["bad_not_an_image"].write_text("this is a text file with an image extension")
    files["cmyk_jpeg"] = save_image(folder / "cmyk.jpg", (80, 96), mode="CMYK")
    files["png16"] = folder / "deep 16-bit.png"
    files["png16"].write_bytes(png16_rgb_bytes(96, 80))
    grey16 = Image.fromarray(np.full((80, 80), 40000, dtype=np.uint16))
    files["grey16"] = folder / "grey16.png"
    grey16.save(files["grey16"])
    rgba = Image.new("RGBA", (96, 96), (0, 0, 0, 0))
    rgba.paste((200, 30, 30, 255), (24, 24, 72, 72))
    files["rgba"] = folder / "transparent.png"
    rgba.save(files["rgba"])
    palette = Image.new("P", (96, 96), 0)
    palette.putpalette([0, 0, 0, 40, 200, 40] + [0] * 762)
    palette.paste(1, (10, 10, 80, 80))
    files["palette"] = folder / "palette.png"
    palette.save(files["palette"], transparency=0)
    exif = Image.Exif()
    exif[0x0112] = 6  # stored landscape, shown portrait
    files["exif_rotated"] = save_image(folder / "rotated.jpg", (128, 64), exif=exif)
    files["unicode_name"] = save_image(folder / "fête à l'été 写真.png", (96, 96))
    for name in set(files) - (files.keys() if only is None else only):
        files.pop(name).unlink()
    return files


def captioned_images(folder: Path, names: str = "ab", side: int = 32) -> Path:
    """`folder` with one image per letter of `names`, each captioned `<folder's last word> <letter>`; returns the
    folder's parent (a kohya dataset when `folder` is named `<repeats>_<name>`)."""
    word = folder.name.split()[-1].split("_")[-1]
    for name in names:
        save_image(folder / f"{name}.png", (side, side), seed=ord(name))
        (folder / f"{name}.txt").write_text(f"{word} {name}", encoding="utf-8")
    return folder.parent
