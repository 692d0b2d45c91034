"""A video family's memory estimate scales with its tokens (issue 40 item 6): latent frames (1 + (frames - 1) /
frame_rule) x each frame's latent tokens, the frames and resolution of the run's video dataset TOML (its longest
target_frames window), else the family's window; the activations linear in tokens (SDPA keeps no attention scores).
The video tier presets' fit at their window is tests/core/test_memory_passes.py's; here, that the window they state is
the one the estimate counts."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
from test_memory_passes import TIER_PRESETS
from test_memory_presets import _comment

from trainers.core.options import TrainConfig, load_config
from trainers.core.registry import FAMILY_NAMES
from trainers.memory_estimate import (estimate_memory, latent_frames, memory_report, published_size, sequence_tokens,
                                      video_windows)
from trainers.models.rules import rules_of

WAN_13B = 'pretrained_model_name_or_path="Wan-AI/Wan2.1-T2V-1.3B-Diffusers"'
VIDEO_FAMILIES = [name for name in FAMILY_NAMES if getattr(rules_of(name), "is_video", False)]


def _dataset(tmp_path: Path, body: str, name: str = "video.toml") -> Path:
    (tmp_path / "clips").mkdir(exist_ok=True)
    path = tmp_path / name
    path.write_text(f'[general]\nresolution = [832, 480]\n\n{body}', encoding="utf-8")
    return path


def _clips(tmp_path: Path, frames: int, resolution: str = "", name: str = "video.toml") -> Path:
    extra = f"resolution = [{resolution}]\n" if resolution else ""
    return _dataset(tmp_path, f'[[datasets]]\nvideo_directory = "clips"\ntarget_frames = [1, {frames}]\n{extra}', name)


def _wan(dataset: Path | None = None) -> TrainConfig:
    preset = Path(__file__).resolve().parents[2] / "presets" / "wan21_t2v_1_3b_lora_12gb.toml"
    return load_config("lora", preset, [WAN_13B] + ([f'dataset_config="{dataset}"'] if dataset else []))


def _activations(cfg: TrainConfig) -> float:
    estimate = estimate_memory(cfg)
    assert estimate is not None
    return estimate.gpu["activations"]


def test_the_estimate_grows_with_the_frames_linearly_in_tokens(tmp_path: Path) -> None:
    short, long = _wan(_clips(tmp_path, 17, name="short.toml")), _wan(_clips(tmp_path, 81, name="long.toml"))
    tokens = published_size("wan21", "Wan-AI/Wan2.1-T2V-1.3B-Diffusers").tokens  # type: ignore[union-attr]
    assert (latent_frames(tokens, 17), latent_frames(tokens, 81)) == (5, 21)
    assert estimate_memory(long).gpu_gb > estimate_memory(short).gpu_gb  # type: ignore[union-attr]
    assert "81-frame windows: 21 latent frames of 1560 tokens" in str(estimate_memory(long).text())  # type: ignore
    ratio = _activations(long) / _activations(short)
    assert ratio == pytest.approx(sequence_tokens(tokens, 832 * 480, 81) / sequence_tokens(tokens, 832 * 480, 17))
    assert ratio > 3.5  # 21 x 1560 + 512 tokens against 5 x 1560 + 512


def test_the_estimate_grows_with_the_resolution_linearly_in_tokens(tmp_path: Path) -> None:
    small = _wan(_clips(tmp_path, 81, "640, 368", "small.toml"))
    large = _wan(_clips(tmp_path, 81, "832, 480", "large.toml"))
    tokens = published_size("wan21", "Wan-AI/Wan2.1-T2V-1.3B-Diffusers").tokens  # type: ignore[union-attr]
    assert _activations(large) / _activations(small) == pytest.approx(
        sequence_tokens(tokens, 832 * 480, 81) / sequence_tokens(tokens, 640 * 368, 81))
    assert _activations(large) > _activations(small)


def test_without_a_video_dataset_the_family_window_is_counted(tmp_path: Path) -> None:
    """The presets name no dataset: the window the family's facts state (Wan's 81 frames) at the run's resolution."""
    assert _activations(_wan()) == pytest.approx(_activations(_wan(_clips(tmp_path, 81))))
    tokens = rules_of("wan21").memory_facts.tokens
    assert video_windows({"dataset_config": str(tmp_path / "missing.toml")}, tokens) == []  # type: ignore[arg-type]


def test_the_longest_window_of_every_dataset_counts(tmp_path: Path) -> None:
    """target_frames rounded down to 1 + 4k, max_frames with frame_extraction "full", an image dataset's 1 frame;
    the estimate takes the dataset whose window has the most tokens."""
    (tmp_path / "images").mkdir()
    path = _dataset(tmp_path, '[[datasets]]\nvideo_directory = "clips"\ntarget_frames = [1, 84]\n\n'
                              '[[datasets]]\nvideo_directory = "clips"\nframe_extraction = "full"\nmax_frames = 45\n'
                              'resolution = 512\ncache_directory = "b"\n\n'
                              '[[datasets]]\nimage_directory = "images"\nresolution = [1024, 1024]\n')
    tokens = rules_of("wan21").memory_facts.tokens
    assert video_windows({"dataset_config": str(path)}, tokens) == [(81, 832 * 480), (45, 512 * 512),
                                                                    (1, 1024 * 1024)]
    assert _activations(_wan(path)) == pytest.approx(_activations(_wan(_clips(tmp_path, 81, name="one.toml"))))


def test_a_video_run_that_does_not_fit_is_told_of_shorter_windows(tmp_path: Path) -> None:
    _, warnings = memory_report(_wan(_clips(tmp_path, 81)), card_gb=6)
    assert warnings and "shorter windows: the 81-frame windows' activations take" in warnings[0]


@pytest.mark.parametrize("family", VIDEO_FAMILIES)
def test_a_video_family_sequence_follows_its_frame_rule(family: str) -> None:
    """The temporal compression the estimate counts is the one its clips are cut by (rules.frame_rule)."""
    rules = rules_of(family)
    sizes = [rules.memory_facts, *rules.memory_variants.values()]
    counted = [size.tokens for size in sizes if size is not None and size.tokens is not None]
    if not counted:
        pytest.skip(f"{family} states no sequence yet: its estimate scales its activation figure by pixels only")
    for tokens in counted:
        assert tokens.frame_rule == rules.frame_rule, family
        assert (tokens.frames - 1) % rules.frame_rule == 0, family


VIDEO_PRESETS = [p for p in TIER_PRESETS if re.search(r"\d+-frame window", _comment(p))]


@pytest.mark.parametrize("path", VIDEO_PRESETS, ids=[p.stem for p in VIDEO_PRESETS])
def test_a_video_preset_states_the_window_its_estimate_counts(path: Path) -> None:
    """A preset names no dataset: its estimate (test_memory_passes: within its tier) is for its family's window."""
    stated = int(re.search(r"(\d+)-frame window", _comment(path)).group(1))  # type: ignore[union-attr]
    family = re.search(r'model_family = "(\w+)"', path.read_text(encoding="utf-8")).group(1)  # type: ignore[union-attr]
    tokens = rules_of(family).memory_facts.tokens
    if tokens is None:
        pytest.skip(f"{family} states no sequence yet")
    assert stated == tokens.frames, path.name
