"""Which frames of a clip a video run trains on, with musubi-tuner's dataset keys and meanings
(dataset/image_video_dataset.py VideoDataset, dataset/media_utils.py load_video). Torch-free.

- `target_frames`: the clip lengths trained, each rounded down to the family's frame rule (Wan, HunyuanVideo:
  1 + 4k frames: a causal 3D VAE with temporal compression 4).
- `frame_extraction`: "head" (the first N frames), "chunk" (N-frame pieces one after another), "slide" (N-frame windows
  every `frame_stride` frames), "uniform" (`frame_sample` windows spread evenly; 1 sample is "head"), "full" (the
  whole clip up to `max_frames`, rounded down to the rule).
- `source_fps`: the clip's frame rate; frames are dropped to the family's rate (Wan: 16 fps) as musubi-tuner drops them.

A clip shorter than every target length gives no window: the caller names it as skipped.
"""
from __future__ import annotations

from collections.abc import Sequence

EXTRACTIONS = ("head", "chunk", "slide", "uniform", "full")


def rounded_frames(count: int, stride: int = 4) -> int:
    """`count` rounded down to 1 + stride x k frames (musubi-tuner's rounding of target_frames)."""
    return (count - 1) // stride * stride + 1


def target_lengths(target_frames: Sequence[int], stride: int = 4) -> tuple[int, ...]:
    """The distinct target lengths, each rounded to the frame rule, sorted."""
    return tuple(sorted({rounded_frames(f, stride) for f in target_frames if f >= 1}))


def kept_frames(total: int, source_fps: float | None, target_fps: float | None) -> list[int]:
    """The clip's frame indices left after dropping frames from source_fps to target_fps (musubi-tuner's rule: a
    frame is kept when int(i x target/source) moves on); all frames without both rates."""
    if not source_fps or not target_fps:
        return list(range(total))
    delta, position, previous, kept = target_fps / source_fps, 0.0, -1, []
    for index in range(total):
        target = int(position)
        position += delta
        if target != previous:
            kept.append(index)
            previous = target
    return kept


def windows(frame_count: int, target_frames: Sequence[int], extraction: str = "head", frame_stride: int = 1,
            frame_sample: int = 1, max_frames: int = 129, stride: int = 4) -> list[tuple[int, int]]:
    """(start, length) of each window of a clip of `frame_count` frames, as musubi-tuner lists them."""
    if extraction not in EXTRACTIONS:
        raise ValueError(f"frame_extraction {extraction!r} is not one of {', '.join(EXTRACTIONS)}")
    lengths = target_lengths(target_frames, stride)
    if extraction == "uniform" and frame_sample == 1:
        extraction = "head"
    out: list[tuple[int, int]] = []
    if extraction == "full":
        length = rounded_frames(min(frame_count, max_frames), stride)
        return [(0, length)] if length >= 1 and frame_count >= 1 else []
    for length in lengths:
        if frame_count < length:
            continue
        if extraction == "head":
            out.append((0, length))
        elif extraction == "chunk":
            out += [(start, length) for start in range(0, frame_count - length + 1, length)]
        elif extraction == "slide":
            out += [(start, length) for start in range(0, frame_count - length + 1, max(frame_stride, 1))]
        else:  # uniform: numpy.linspace(0, frame_count - length, frame_sample, dtype=int)
            span = frame_count - length
            out += [(int(span * i / (frame_sample - 1)), length) for i in range(frame_sample)]
    return out


def frame_indices(frame_count: int, target_frames: Sequence[int], extraction: str = "head", frame_stride: int = 1,
                  frame_sample: int = 1, max_frames: int = 129, source_fps: float | None = None,
                  target_fps: float | None = None, stride: int = 4) -> list[tuple[int, ...]]:
    """The source frame indices of each window, after the frame-rate drop."""
    kept = kept_frames(frame_count, source_fps, target_fps)
    return [tuple(kept[start:start + length]) for start, length in
            windows(len(kept), target_frames, extraction, frame_stride, frame_sample, max_frames, stride)]
