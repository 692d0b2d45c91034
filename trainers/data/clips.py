"""Video clips read with PyAV: a clip file (mp4, webm, mov, gif, avi, mkv, ...) or a folder of numbered images
(one clip, its frames in name order, as musubi-tuner's load_video reads a folder). Torch-free.

``probe_clip`` reads what the catalog needs cheaply: frame rate, frame count, size; it decodes one frame, so a clip
whose header opens but whose frames do not is found before training. ``read_frames`` decodes the frames a window
takes, as RGB uint8 (F, H, W, 3). Anything unreadable raises ``ClipError`` (path and reason), which the catalog
turns into a skip line and the dataset into a substitute, as for images.

The frame count: the stream's own count where the container states it (mp4, mov), else the packets counted without
decoding them (webm, gif, avi often state none); a stream whose stated count is wrong gives fewer frames when read,
and ``read_frames`` names that.
"""
from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image

from trainers.core.errors import BadInput
from trainers.data.kohya_folders import IMAGE_EXTENSIONS
from trainers.data.probe import ImageSkipped, probe_image

VIDEO_EXTENSIONS: frozenset[str] = frozenset({".mp4", ".webm", ".mov", ".gif", ".avi", ".mkv", ".m4v", ".mpg",
                                              ".mpeg", ".flv", ".wmv"})


class ClipError(BadInput):
    """A clip could not be opened or decoded. ``path``: the file (or folder); ``reason``: why, in a few words."""

    def __init__(self, path: Path, reason: str) -> None:
        self.path = Path(path)
        self.reason = reason
        super().__init__(f"could not read clip {self.path}: {reason}")


@dataclass(frozen=True)
class ClipInfo:
    path: Path
    frames: int
    fps: float | None  # None: not known (a folder of images; set source_fps)
    size: tuple[int, int]  # (width, height)

    @property
    def duration(self) -> float | None:
        """Seconds, from the frame count and rate."""
        return self.frames / self.fps if self.fps else None

    @property
    def is_folder(self) -> bool:
        return self.path.is_dir()


def is_video_file(path: Path) -> bool:
    return path.suffix.lower() in VIDEO_EXTENSIONS


def is_image_file(path: Path) -> bool:
    return path.suffix.lower() in IMAGE_EXTENSIONS


def folder_frames(folder: Path) -> list[Path]:
    """The images of a frames folder in name order (musubi-tuner sorts the names as text)."""
    try:
        return sorted((p for p in folder.iterdir() if p.is_file() and is_image_file(p)), key=lambda p: p.name)
    except OSError as err:
        raise ClipError(folder, f"cannot be read ({err.strerror or err})") from None


def probe_clip(path: Path) -> ClipInfo:
    """A clip's frame count, rate and size; ClipError when it cannot be trained on."""
    path = Path(path)
    if path.is_dir():
        return _probe_folder(path)
    try:
        nbytes = path.stat().st_size
    except OSError as err:
        raise ClipError(path, f"cannot be read ({err.strerror or err})") from None
    if nbytes == 0:
        raise ClipError(path, "empty file (0 bytes)")
    import av  # noqa: PLC0415 - PyAV only where clips are read

    try:
        with av.open(str(path)) as container:
            if not container.streams.video:
                raise ClipError(path, "has no video stream (not a video, or truncated before its index)")
            stream = container.streams.video[0]
            rate = stream.average_rate or stream.guessed_rate or stream.base_rate
            fps = float(rate) if rate else None
            count = stream.frames
            first = next(iter(container.decode(stream)), None)
            if first is None:
                raise ClipError(path, "no frame decodes (truncated or corrupt)")
            size = (first.width, first.height)
            if count <= 0:
                container.seek(0)
                count = sum(1 for packet in container.demux(stream) if packet.size)
    except ClipError:
        raise
    except (av.error.FFmpegError, OSError, ValueError, StopIteration) as err:
        raise ClipError(path, f"not a readable video (truncated or corrupt: {err})") from None
    if count < 1:
        raise ClipError(path, "has no frames")
    return ClipInfo(path, int(count), fps, size)


def _probe_folder(folder: Path) -> ClipInfo:
    frames = folder_frames(folder)
    if not frames:
        raise ClipError(folder, "a frames folder without images")
    try:
        size = probe_image(frames[0])
    except ImageSkipped as err:
        raise ClipError(frames[0], err.reason) from None
    return ClipInfo(folder, len(frames), None, size)


def read_frames(path: Path, indices: Sequence[int]) -> np.ndarray:
    """The frames at `indices` (ascending source-frame numbers) as RGB uint8, shape (len(indices), H, W, 3)."""
    got = dict(iter_frames(path, indices))
    shapes = {frame.shape for frame in got.values()}
    if len(shapes) > 1:
        raise ClipError(path, f"its frames differ in size ({', '.join(f'{s[1]}x{s[0]}' for s in sorted(shapes))})")
    return np.stack([got[i] for i in indices])


def iter_frames(path: Path, indices: Sequence[int]) -> Iterator[tuple[int, np.ndarray]]:
    """(frame number, RGB uint8 (H, W, 3)) of each wanted frame, in order, decoding the clip once from its start;
    ClipError when the clip ends (or breaks) before the last of them."""
    path = Path(path)
    if not indices:
        raise ValueError("iter_frames needs at least one frame index")
    wanted = sorted(set(indices))
    frames = _folder_frames(path, wanted) if path.is_dir() else _decode(path, wanted)
    expected = iter(wanted)
    for number, frame in frames:
        next(expected)
        yield number, frame
    missing = next(expected, None)
    if missing is not None:
        raise ClipError(path, f"ends before frame {missing}, which the window needs (the clip is shorter than its "
                        "header says, or truncated)")


def _folder_frames(folder: Path, wanted: list[int]) -> Iterator[tuple[int, np.ndarray]]:
    files = folder_frames(folder)
    for index in wanted:
        if index >= len(files):
            return
        try:
            with Image.open(files[index]) as im:
                yield index, np.asarray(im.convert("RGB"))
        except (OSError, SyntaxError, ValueError) as err:
            raise ClipError(files[index], f"frame {index} does not decode ({err})") from None


def _decode(path: Path, wanted: list[int]) -> Iterator[tuple[int, np.ndarray]]:
    import av  # noqa: PLC0415

    want, last, found = set(wanted), wanted[-1], 0
    try:
        with av.open(str(path)) as container:
            stream = container.streams.video[0]
            stream.thread_type = "AUTO"
            for number, frame in enumerate(container.decode(stream)):
                if number in want:
                    found += 1
                    yield number, frame.to_ndarray(format="rgb24")
                if number >= last:
                    return
    except (av.error.FFmpegError, OSError, ValueError, IndexError) as err:
        if not found:
            raise ClipError(path, f"not a readable video (truncated or corrupt: {err})") from None
