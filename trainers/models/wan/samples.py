"""Wan's samples as short clips: decoded frames written as an H.264 mp4 (PyAV) at the family's frame rate, with the
sample's A1111 parameters in the container's comment, atomically (a reader never sees half a file)."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from trainers.core.fsio import atomic_path

CODECS = ("libx264", "mpeg4")  # H.264 plays in every browser; mpeg4 where this PyAV build lacks it


def write_mp4(frames: np.ndarray, path: Path, fps: float, parameters: str = "") -> Path:
    """Write `frames` (F, H, W, 3) uint8 as `path` (an .mp4); sides are cut to even numbers (yuv420p). Returns it."""
    import av

    height, width = frames.shape[1] // 2 * 2, frames.shape[2] // 2 * 2
    codec = next(c for c in CODECS if c in av.codecs_available)
    with atomic_path(path) as tmp:
        with av.open(str(tmp), "w", format="mp4") as container:
            if parameters:
                container.metadata["comment"] = parameters
            stream = container.add_stream(codec, rate=round(fps))
            stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
            for frame in frames[:, :height, :width]:
                for packet in stream.encode(av.VideoFrame.from_ndarray(np.ascontiguousarray(frame), format="rgb24")):
                    container.mux(packet)
            for packet in stream.encode():
                container.mux(packet)
    return path
