"""Clips with a sound track, written with PyAV (the tests of the clips' sound and of LTX-2's audio stream)."""
from __future__ import annotations

from pathlib import Path

import numpy as np

CAPTION = "a drum beats"


def write_sound_clip(path: Path, frames: int, fps: int = 24, rate: int = 22050, channels: int = 2,
                     silent_until: float = 0.0, caption: str = CAPTION, sound: bool = True) -> Path:
    """An mpeg4 clip with an AAC track (none when not `sound`): a 440 Hz tone, silent for its first `silent_until`
    seconds."""
    import av

    with av.open(str(path), "w") as container:
        video = container.add_stream("mpeg4", rate=fps)
        video.width, video.height, video.pix_fmt = 64, 64, "yuv420p"
        audio = container.add_stream("aac", rate=rate) if sound else None
        if audio is not None:
            audio.layout = "stereo" if channels == 2 else "mono"
        for i in range(frames):
            pixels = np.full((64, 64, 3), i * 12 % 256, np.uint8)
            for packet in video.encode(av.VideoFrame.from_ndarray(pixels, format="rgb24")):
                container.mux(packet)
        for packet in video.encode():
            container.mux(packet)
        if audio is None:
            path.with_suffix(".txt").write_text(caption)
            return path
        t = np.arange(int(frames / fps * rate)) / rate
        wave = np.where(t >= silent_until, 0.5 * np.sin(2 * np.pi * 440 * t), 0).astype(np.float32)
        for start in range(0, len(t), 1024):
            frame = av.AudioFrame.from_ndarray(np.ascontiguousarray(np.stack([wave[start:start + 1024]] * channels)),
                                               format="fltp", layout=audio.layout.name)
            frame.sample_rate, frame.pts = rate, start
            for packet in audio.encode(frame):
                container.mux(packet)
        for packet in audio.encode():
            container.mux(packet)
    path.with_suffix(".txt").write_text(caption)
    return path


def window(path: Path, frames: tuple[int, ...]) -> object:
    """The catalog's window of `frames` of a clip, at a 64x64 bucket."""
    from trainers.data.clips import probe_clip
    from trainers.data.video_catalog import CatalogClip

    return CatalogClip(path, CAPTION, probe_clip(path), frames, (64, 64), 0)
