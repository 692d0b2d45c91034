"""The sound of a clip window, read with PyAV (torch-free): what a family that trains an audio stream beside the
frames asks for (`ClipSound`: the rate its audio autoencoder reads and the rate its frames play at).

A window's sound starts at its first frame's time in the clip (the frame number over the clip's own rate, from the
video stream's start) and lasts as long as its frames play at the family's rate, so it is what plays with them once
`source_fps` brings the clip to that rate. It is resampled by FFmpeg's resampler (libswresample) to the asked rate,
mixed to stereo as Lightricks' LTX-2 trainer mixes (mono doubled; 5.1 and 7.1 to left and right with the centre and
the surrounds at 0.707 of the fronts, normalised to sum 1; other layouts averaged), and padded with silence where the
track ends early. A clip without an audio stream, a frames folder and an image have no sound: `present` is False and
the waveform silent.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from trainers.data.clips import ClipError
from trainers.data.video_catalog import CatalogClip


@dataclass(frozen=True)
class ClipSound:
    """What a family reads of each window's sound: `sample_rate` samples a second in `channels` (1 or 2), for frames
    played at `frame_rate`."""

    sample_rate: int
    frame_rate: float
    channels: int = 2

    def samples(self, frames: int) -> int:
        """The samples of a window of `frames` frames."""
        return int(frames / self.frame_rate * self.sample_rate)


def has_sound(path: Path) -> bool:
    """Whether a clip file has an audio stream (a frames folder or an image has none)."""
    if Path(path).is_dir():
        return False
    import av  # noqa: PLC0415

    try:
        with av.open(str(path)) as container:
            return bool(container.streams.audio)
    except (av.error.FFmpegError, OSError, ValueError):
        return False


def window_sound(clip: CatalogClip, sound: ClipSound) -> tuple[np.ndarray, bool]:
    """(the window's waveform (channels, samples) float32 in [-1, 1], whether the clip has sound); ClipError when
    its audio stream does not decode."""
    count = sound.samples(len(clip.frames))
    silent = np.zeros((sound.channels, count), np.float32)
    if clip.is_image or clip.path.is_dir() or not clip.info.fps:
        return silent, False
    start = clip.frames[0] / clip.info.fps
    wave = read_sound(clip.path, start, count, sound.sample_rate)
    if wave is None:
        return silent, False
    return to_channels(wave, sound.channels), True


def read_sound(path: Path, start: float, count: int, sample_rate: int) -> np.ndarray | None:
    """`count` samples at `sample_rate` of the first audio stream from `start` seconds after the video stream's start,
    (source channels, count) float32, silence where the track does not reach; None: no audio stream."""
    import av  # noqa: PLC0415

    try:
        with av.open(str(path)) as container:
            if not container.streams.audio:
                return None
            stream = container.streams.audio[0]
            channels = stream.channels or 1
            video = container.streams.video[0] if container.streams.video else None
            zero = float(video.start_time * video.time_base) if video is not None and video.start_time is not None \
                and video.time_base is not None else 0.0
            resampler = av.AudioResampler(format="fltp", rate=sample_rate)
            chunks: list[np.ndarray] = []
            first: float | None = None
            have, need = 0, None
            for frame in container.decode(stream):
                if first is None:
                    first = float(frame.time) if frame.time is not None else zero
                    need = max(0, round((start + zero - first) * sample_rate)) + count
                for out in resampler.resample(frame):
                    chunks.append(out.to_ndarray().astype(np.float32, copy=False))
                    have += chunks[-1].shape[1]
                if need is not None and have >= need:
                    break
            else:
                for out in resampler.resample(None):
                    chunks.append(out.to_ndarray().astype(np.float32, copy=False))
    except (av.error.FFmpegError, OSError, ValueError) as err:
        raise ClipError(path, f"its audio does not decode ({err})") from None
    if not chunks or first is None:
        return np.zeros((channels, count), np.float32)
    wave = np.concatenate(chunks, axis=1)
    offset = round((start + zero - first) * sample_rate)  # where the window starts in the decoded samples
    if offset < 0:  # the track starts after the window: silence before it
        wave = np.concatenate([np.zeros((wave.shape[0], -offset), np.float32), wave], axis=1)
        offset = 0
    piece = wave[:, offset:offset + count]
    if piece.shape[1] < count:
        piece = np.concatenate([piece, np.zeros((wave.shape[0], count - piece.shape[1]), np.float32)], axis=1)
    return np.ascontiguousarray(piece)


# each output channel's weights over 5.1's and 7.1's channels (FFmpeg's order: FL FR FC LFE BL BR [SL SR]): the fronts
# at 1, the centre and the surrounds at 0.707, normalised to sum 1; the LFE left out
_MAIN, _SIDE = 1.0, 0.707
_MIXES = {6: ((_MAIN, 0, _SIDE, 0, _SIDE, 0), (0, _MAIN, _SIDE, 0, 0, _SIDE)),
          8: ((_MAIN, 0, _SIDE, 0, _SIDE, 0, _SIDE, 0), (0, _MAIN, _SIDE, 0, 0, _SIDE, 0, _SIDE))}


def to_channels(wave: np.ndarray, channels: int) -> np.ndarray:
    """(channels, samples) of a waveform of any channel count: stereo as Lightricks' trainer mixes it, mono as the
    mean."""
    have = wave.shape[0]
    if channels == 1:
        return wave.mean(axis=0, keepdims=True).astype(np.float32)
    if have == channels:
        return wave
    if have == 1:
        return np.repeat(wave, channels, axis=0)
    if channels == 2 and have in _MIXES:
        weights = np.asarray(_MIXES[have], np.float32)
        return (weights / weights.sum(axis=1, keepdims=True)) @ wave
    return np.repeat(wave.mean(axis=0, keepdims=True), channels, axis=0).astype(np.float32)
