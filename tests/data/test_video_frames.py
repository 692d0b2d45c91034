"""Frame extraction with musubi-tuner's keys against hand-computed windows (trainers/data/frames.py)."""
from __future__ import annotations

import pytest

from trainers.data.frames import frame_indices, kept_frames, rounded_frames, target_lengths, windows


def test_target_frames_are_rounded_to_one_plus_four_k() -> None:
    assert [rounded_frames(n) for n in (1, 4, 5, 8, 9, 16, 17)] == [1, 1, 5, 5, 9, 13, 17]
    assert target_lengths([16, 1, 9, 10]) == (1, 9, 13)


def test_head_takes_the_first_frames_of_each_length_the_clip_holds() -> None:
    assert windows(13, [1, 9, 17], "head") == [(0, 1), (0, 9)]  # 17 frames: longer than the clip


def test_chunk_slide_uniform_and_full() -> None:
    assert windows(17, [5], "chunk") == [(0, 5), (5, 5), (10, 5)]
    assert windows(13, [9], "slide", frame_stride=2) == [(0, 9), (2, 9), (4, 9)]
    assert windows(17, [9], "uniform", frame_sample=3) == [(0, 9), (4, 9), (8, 9)]
    assert windows(17, [9], "uniform", frame_sample=1) == [(0, 9)]  # musubi: uniform with 1 sample is head
    assert windows(12, [], "full", max_frames=129) == [(0, 9)]
    assert windows(17, [], "full", max_frames=10) == [(0, 9)]


def test_a_clip_shorter_than_every_target_gives_no_window() -> None:
    assert windows(8, [9, 17], "head") == [] and windows(8, [9], "slide") == []


def test_frames_are_dropped_to_the_family_rate_as_musubi_drops_them() -> None:
    assert kept_frames(8, 32.0, 16.0) == [0, 2, 4, 6]
    assert kept_frames(5, None, 16.0) == [0, 1, 2, 3, 4]
    assert frame_indices(20, [5], "head", source_fps=32.0, target_fps=16.0) == [(0, 2, 4, 6, 8)]


def test_an_unknown_extraction_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="chain"):
        windows(9, [9], "chain")
