"""Clips decoded with PyAV (trainers/data/clips.py): tiny clips written in the test, frame counts, rates, frames
folders, and broken clips named."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from trainers.data.clips import ClipError, probe_clip, read_frames

av = pytest.importorskip("av")


def write_clip(path: Path, frames: int, fps: int, codec: str = "mpeg4", size: tuple[int, int] = (32, 32)) -> Path:
    """A clip whose frame i is grey level 12 x i (mpeg4 in .mp4/.avi, gif, or libvpx in .webm)."""
    with av.open(str(path), "w") as container:
        stream = container.add_stream(codec, rate=fps)
        stream.width, stream.height = size
        stream.pix_fmt = "rgb8" if codec == "gif" else "yuv420p"
        for i in range(frames):
            pixels = np.full((size[1], size[0], 3), i * 12 % 256, np.uint8)
            for packet in stream.encode(av.VideoFrame.from_ndarray(pixels, format="rgb24")):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    return path


def write_frames_folder(folder: Path, frames: int, size: tuple[int, int] = (32, 32)) -> Path:
    folder.mkdir(parents=True)
    for i in range(frames):
        Image.new("RGB", size, (i * 12, 0, 0)).save(folder / f"{i:04d}.png")
    return folder


@pytest.mark.parametrize(("name", "frames", "fps", "codec"), [
    ("a.mp4", 17, 16, "mpeg4"), ("b.gif", 9, 10, "gif"), ("c.webm", 13, 24, "libvpx"), ("d.avi", 11, 8, "mpeg4"),
    ("e.mov", 10, 25, "mpeg4")])
def test_clips_decode_with_their_frame_count_rate_and_size(tmp_path: Path, name: str, frames: int, fps: int,
                                                           codec: str) -> None:
    info = probe_clip(write_clip(tmp_path / name, frames, fps, codec))
    assert (info.frames, info.fps, info.size) == (frames, fps, (32, 32))
    assert info.duration == pytest.approx(frames / fps)
    pixels = read_frames(info.path, [0, 4, 8])
    assert pixels.shape == (3, 32, 32, 3) and pixels.dtype == np.uint8
    if codec != "gif":  # gif's palette quantises the greys
        assert np.abs(pixels[:, 16, 16, 0].astype(int) - [0, 48, 96]).max() <= 6


def test_a_folder_of_numbered_images_is_one_clip(tmp_path: Path) -> None:
    folder = write_frames_folder(tmp_path / "walk", 10)
    info = probe_clip(folder)
    assert (info.frames, info.fps, info.size, info.is_folder) == (10, None, (32, 32), True)
    assert read_frames(folder, [2, 5])[:, 0, 0, 0].tolist() == [24, 60]


def test_broken_clips_are_named(tmp_path: Path) -> None:
    raw = write_clip(tmp_path / "whole.mp4", 17, 16).read_bytes()
    (tmp_path / "cut.mp4").write_bytes(raw[: len(raw) // 2])
    (tmp_path / "empty.webm").write_bytes(b"")
    (tmp_path / "text.mov").write_text("not a video")
    for name in ("cut.mp4", "empty.webm", "text.mov"):
        with pytest.raises(ClipError) as err:
            probe_clip(tmp_path / name)
        assert err.value.path == tmp_path / name and name in str(err.value)
    with pytest.raises(ClipError, match="ends before frame 20"):
        read_frames(tmp_path / "whole.mp4", [0, 20])


# --- musubi-tuner's dataset TOML keys (trainers/data/video_toml.py)

def _config(tmp_path: Path, text: str) -> Path:
    (tmp_path / "clips").mkdir(exist_ok=True)
    (tmp_path / "stills").mkdir(exist_ok=True)
    path = tmp_path / "dataset.toml"
    path.write_text(text)
    return path


def test_musubi_video_keys_read_with_musubi_defaults(tmp_path: Path) -> None:
    from trainers.data.video_toml import load_video_dataset_config

    warnings: list[str] = []
    specs = load_video_dataset_config(_config(tmp_path, """
[general]
resolution = [48, 32]
caption_extension = ".caption"
enable_bucket = true
[[datasets]]
video_directory = "clips"
target_frames = [1, 10, 17]
frame_extraction = "slide"
frame_stride = 3
source_fps = 30.0
num_repeats = 2
[[datasets]]
image_directory = "stills"
resolution = 32
batch_size = 2
"""), warnings)
    video, images = specs
    assert (video.directory, video.resolution, video.caption_extension, video.enable_bucket) == (
        tmp_path / "clips", (48, 32), ".caption", True)
    assert (video.target_frames, video.frame_extraction, video.frame_stride, video.source_fps, video.num_repeats) == (
        (1, 10, 17), "slide", 3, 30.0, 2)
    assert (video.frame_sample, video.max_frames, video.batch_size, video.bucket_no_upscale) == (1, 129, 1, False)
    assert images.is_image and images.resolution == (32, 32) and images.batch_size == 2 and not warnings


def test_unknown_and_unhonoured_keys_are_refused_by_name(tmp_path: Path) -> None:
    from trainers.core.options.schema import ConfigError
    from trainers.data.video_toml import load_video_dataset_config

    with pytest.raises(ConfigError) as err:
        load_video_dataset_config(_config(tmp_path, """
[general]
target_frames = [9]
[[datasets]]
video_directory = "clips"
frame_extraction = "chain"
control_directory = "clips"
frame_strid = 2
fp_latent_window_size = 9
"""), [])
    text = str(err.value)
    for expected in ("target_frames belongs to a [[datasets]] entry", "'chain' is not musubi-tuner's name",
                     "control_directory (musubi-tuner) is refused", "did you mean 'frame_stride'",
                     "fp_latent_window_size (musubi-tuner) is refused"):
        assert expected in text, text


def test_an_image_run_refuses_a_video_dataset_config_by_name(tmp_path: Path) -> None:
    from trainers.core.options.schema import ConfigError
    from trainers.data.dataset_toml import load_dataset_config

    path = _config(tmp_path, '[[datasets]]\nvideo_directory = "clips"\n')
    with pytest.raises(ConfigError, match="musubi-tuner video dataset config"):
        load_dataset_config(path, {}, [])


# --- the catalog: windows, frame buckets, skips (trainers/data/video_catalog.py)

def _dataset_folder(tmp_path: Path) -> Path:
    """3 clips (17, 9 and 13 frames), a PNG, a truncated clip and a 5-frame clip, each with a caption."""
    folder = tmp_path / "clips"
    folder.mkdir(exist_ok=True)
    write_clip(folder / "a.mp4", 17, 16)
    write_clip(folder / "b.gif", 9, 10, "gif")
    write_clip(folder / "c.webm", 13, 24, "libvpx")
    Image.new("RGB", (32, 32), (200, 10, 10)).save(folder / "still.png")
    raw = (folder / "a.mp4").read_bytes()
    (folder / "broken.mp4").write_bytes(raw[: len(raw) // 3])
    write_clip(folder / "short.mp4", 5, 16)
    for name in ("a", "b", "c", "still", "broken", "short"):
        (folder / f"{name}.txt").write_text(f"caption of {name}\n")
    return folder


def _catalog(tmp_path: Path, toml: str, **kwargs: object):
    from trainers.data.video_catalog import build_video_catalog
    from trainers.data.video_toml import load_video_dataset_config

    _dataset_folder(tmp_path)
    return build_video_catalog(load_video_dataset_config(_config(tmp_path, toml), []), **kwargs)


HEAD = '[general]\nresolution = 32\n[[datasets]]\nvideo_directory = "clips"\n'


def test_head_windows_buckets_and_skips(tmp_path: Path) -> None:
    catalog = _catalog(tmp_path, HEAD + "target_frames = [9, 17]\nnum_repeats = 2\n")
    windows = {(c.path.name, c.frames[0], len(c.frames)) for c in catalog.clips}
    assert windows == {("a.mp4", 0, 9), ("a.mp4", 0, 17), ("b.gif", 0, 9), ("c.webm", 0, 9), ("still.png", 0, 1)}
    assert next(c for c in catalog.clips if c.path.name == "still.png").is_image
    assert len(catalog.samples) == 2 * len(catalog.clips)
    assert set(catalog.bucket_counts()) == {(0, 9, 32, 32), (0, 17, 32, 32), (0, 1, 32, 32)}
    reasons = {s.path.name: s.reason for s in catalog.skipped}
    assert set(reasons) == {"broken.mp4", "short.mp4"}
    assert reasons["short.mp4"] == "5 frame(s), shorter than every target_frames length (9, 17)"
    assert "truncated" in reasons["broken.mp4"] or "no video stream" in reasons["broken.mp4"]
    lines = catalog.report_lines()
    assert any(line.startswith("skipped ") and "short.mp4" in line for line in lines)
    assert next(c for c in catalog.clips if c.path.name == "b.gif").caption == "caption of b"
    batches = list(catalog.batch_sampler(num_processes=1, seed=0))
    assert sum(len(b) for b in batches) == len(catalog.samples)
    assert all(len({catalog.bucket_of(key[1]) for key in batch}) == 1 for batch in batches)


def test_chunk_slide_uniform_and_source_fps_against_hand_computed_frames(tmp_path: Path) -> None:
    def frames_of(extra: str, **kwargs: object) -> list[tuple[int, ...]]:
        catalog = _catalog(tmp_path, HEAD + extra, **kwargs)
        return [c.frames for c in catalog.clips if c.path.name == "a.mp4"]

    assert frames_of('target_frames = [5]\nframe_extraction = "chunk"\n') == [
        tuple(range(0, 5)), tuple(range(5, 10)), tuple(range(10, 15))]
    assert [w[0] for w in frames_of('target_frames = [9]\nframe_extraction = "slide"\nframe_stride = 4\n')] == [
        0, 4, 8]
    assert [w[0] for w in frames_of('target_frames = [9]\nframe_extraction = "uniform"\nframe_sample = 3\n')] == [
        0, 4, 8]
    assert frames_of('frame_extraction = "full"\nmax_frames = 15\n') == [tuple(range(13))]
    # 32 fps clips dropped to the family's 16: every other frame, 9 of 17 left
    assert frames_of("target_frames = [9]\nsource_fps = 32.0\n", target_fps=16.0) == [tuple(range(0, 17, 2))]
    assert frames_of("target_frames = [9]\n", frame_rule=8) == [tuple(range(9))]  # LTX-2's 1 + 8k


def test_a_clip_shorter_than_every_target_is_named_after_the_fps_drop(tmp_path: Path) -> None:
    catalog = _catalog(tmp_path, HEAD + "target_frames = [13]\nsource_fps = 32.0\n", target_fps=16.0)
    reasons = {s.path.name: s.reason for s in catalog.skipped}
    assert reasons["c.webm"] == "13 frame(s) (7 after the source_fps drop), shorter than every target_frames " \
                                "length (13)"
    assert [c.path.name for c in catalog.clips] == ["still.png"]  # the image still trains, as 1 frame


def test_nothing_left_is_a_named_error_and_frames_folders_are_clips(tmp_path: Path) -> None:
    from trainers.data.kohya_folders import DatasetLayoutError

    with pytest.raises(DatasetLayoutError, match="no clips or images found in"):
        _catalog(tmp_path, '[[datasets]]\nvideo_directory = "stills"\n')
    (tmp_path / "stills" / "cut.mp4").write_bytes((tmp_path / "clips" / "broken.mp4").read_bytes())
    with pytest.raises(DatasetLayoutError, match="no usable clips: every clip and image was skipped"):
        _catalog(tmp_path, '[[datasets]]\nvideo_directory = "stills"\n')
    write_frames_folder(tmp_path / "clips" / "walk", 9)
    (tmp_path / "clips" / "walk.txt").write_text("walking")
    catalog = _catalog(tmp_path, HEAD + "target_frames = [9]\n")
    walk = next(c for c in catalog.clips if c.path.name == "walk")
    assert walk.frames == tuple(range(9)) and walk.caption == "walking"


def test_an_image_dataset_trains_as_one_frame_clips_and_buckets_follow_the_area(tmp_path: Path) -> None:
    (tmp_path / "stills").mkdir()
    Image.new("RGB", (64, 16), "blue").save(tmp_path / "stills" / "wide.png")
    (tmp_path / "stills" / "wide.txt").write_text("wide")
    catalog = _catalog(tmp_path, '[general]\nresolution = 32\nenable_bucket = true\n'
                       '[[datasets]]\nimage_directory = "stills"\n')
    (clip,) = catalog.clips
    assert clip.is_image and clip.frame_bucket == (1, 64, 16)  # musubi-tuner's buckets of 32 x 32's area


# --- items and caching (trainers/data/video_dataset.py, video_cache.py)

def test_an_item_is_frames_channels_height_width_in_minus_one_to_one(tmp_path: Path) -> None:
    from trainers.data.video_dataset import ClipWindows, collate_clips, frames_as_uint8

    catalog = _catalog(tmp_path, '[general]\nresolution = [16, 16]\n[[datasets]]\nvideo_directory = "clips"\n'
                       "target_frames = [9]\n")
    dataset = ClipWindows(catalog, lambda captions: [torch_ids(captions)])
    index = next(i for i, s in enumerate(catalog.samples) if catalog.clips[s].path.name == "a.mp4")
    item = dataset[(0, index, 0)]
    assert item["pixels"].shape == (9, 3, 16, 16) and item["pixels"].min() >= -1 and item["pixels"].max() <= 1
    greys = frames_as_uint8(item["pixels"])[:, 8, 8, 0].astype(int)
    assert np.abs(greys - np.arange(9) * 12).max() <= 8
    image = dataset[(0, next(i for i, s in enumerate(catalog.samples) if catalog.clips[s].is_image), 0)]
    assert image["pixels"].shape == (1, 3, 16, 16)
    batch = collate_clips([item, dataset[(0, index, 1)]])
    assert batch["pixels"].shape == (2, 9, 3, 16, 16) and batch["loss_weights"].tolist() == [1.0, 0.0]


def test_a_clip_that_breaks_after_the_scan_is_replaced_within_its_bucket(tmp_path: Path) -> None:
    from trainers.data.video_dataset import ClipWindows

    catalog = _catalog(tmp_path, HEAD + "target_frames = [9]\n")
    index = next(i for i, s in enumerate(catalog.samples) if catalog.clips[s].path.name == "a.mp4")
    (tmp_path / "clips" / "a.mp4").write_bytes(b"gone")
    item = ClipWindows(catalog, lambda captions: [torch_ids(captions)])[(0, index, 0)]
    assert item["pixels"].shape[0] == 9 and "a.mp4" in item["problems"][0]
    import torch

    from trainers.data.video_cache import build_clip_latent_cache

    _, failures = build_clip_latent_cache(catalog, lambda px: (px, torch.zeros_like(px)), "vae", to_disk=False)
    assert [catalog.clips[i].path.name for i in failures] == ["a.mp4"]


def test_the_cache_key_changes_when_the_clip_or_its_window_changes(tmp_path: Path) -> None:
    import dataclasses
    import os

    import torch

    from trainers.data.video_cache import build_clip_latent_cache, clip_cache_file, clip_entry_key

    catalog = _catalog(tmp_path, '[general]\nresolution = 16\n[[datasets]]\nvideo_directory = "clips"\n'
                       "target_frames = [9]\n")
    clip = next(c for c in catalog.clips if c.path.name == "a.mp4")
    key = clip_entry_key(clip, "vae")
    assert clip_entry_key(dataclasses.replace(clip, frames=tuple(range(1, 10))), "vae") != key
    assert clip_entry_key(clip, "other vae") != key
    calls: list[tuple[int, ...]] = []

    def encode(pixels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        calls.append(tuple(pixels.shape))
        latent = pixels[:, ::4, :1, ::8, ::8].transpose(1, 2)
        return latent, torch.ones_like(latent)

    cache, failures = build_clip_latent_cache(catalog, encode, "vae", to_disk=True)
    assert not failures and clip_cache_file(clip).is_file() and len(calls) == len(catalog.clips)
    mean, _ = cache.get(clip)
    assert mean.shape == (1, 3, 2, 2)
    build_clip_latent_cache(catalog, encode, "vae", to_disk=True)
    assert len(calls) == len(catalog.clips)  # nothing changed: nothing encoded again
    stat = clip.path.stat()
    os.utime(clip.path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
    assert clip_entry_key(clip, "vae") != key
    build_clip_latent_cache(catalog, encode, "vae", to_disk=True)
    assert len(calls) == len(catalog.clips) + 1  # only the changed clip's window


def torch_ids(captions: list[str]):
    import torch

    return torch.tensor([[len(c)] for c in captions])


def test_a_video_jsonl_file_lists_clips_and_captions(tmp_path: Path) -> None:
    (tmp_path / "list.jsonl").write_text('{"video_path": "clips/b.gif", "caption": "from the list"}\n'
                                         'not json\n{"video_path": "clips/a.mp4", "caption": "second"}\n')
    warnings: list[str] = []
    catalog = _catalog(tmp_path, '[general]\nresolution = 32\n[[datasets]]\nvideo_jsonl_file = "list.jsonl"\n'
                       "target_frames = [9]\n", warnings=warnings)
    assert [(c.path.name, c.caption) for c in catalog.clips] == [("b.gif", "from the list"), ("a.mp4", "second")]
    assert any("line 2: not JSON" in w for w in warnings)


def test_a_musubi_import_keeps_a_video_dataset_config_for_the_video_family(tmp_path: Path) -> None:
    from trainers.adapters.musubi.options import read_musubi
    from trainers.core.errors import ConfigIssue

    path = _config(tmp_path, '[[datasets]]\nimage_directory = "stills"\n[[datasets]]\nvideo_directory = "clips"\n')
    issues: list[ConfigIssue] = []
    out = read_musubi({"network_module": "networks.lora_qwen_image", "dataset_config": str(path)}, "lora", [],
                      issues)
    assert out["dataset_config"] == str(path) and not [i for i in issues if i.field == "dataset_config"]
    image_only = _config(tmp_path, '[[datasets]]\nimage_directory = "stills"\n')
    read_musubi({"network_module": "networks.lora_qwen_image", "dataset_config": str(image_only)}, "lora", [], issues)
    assert [i.field for i in issues] == ["dataset_config"]  # refused by name, as before


def test_clips_at_another_rate_without_source_fps_are_said(tmp_path: Path) -> None:
    warnings: list[str] = []
    _catalog(tmp_path, HEAD + "target_frames = [9]\n", target_fps=16.0, warnings=warnings)
    note = next(w for w in warnings if "source_fps" in w)
    assert "1 at 10 fps, 1 at 24 fps: every frame is trained (the model's rate is 16 fps)" in note


def test_windows_of_one_clip_are_cached_from_one_decode_with_the_items_pixels(tmp_path: Path,
                                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    import trainers.data.clips as clips
    from trainers.data.video_cache import build_clip_latent_cache
    from trainers.data.video_dataset import clip_pixels

    catalog = _catalog(tmp_path, '[general]\nresolution = 16\n[[datasets]]\nvideo_directory = "clips"\n'
                       'target_frames = [5, 9]\nframe_extraction = "slide"\nframe_stride = 4\n')
    opened: list[str] = []
    original = clips._decode

    def counted(path: Path, wanted: list[int]):
        opened.append(Path(path).name)
        return original(path, wanted)

    monkeypatch.setattr(clips, "_decode", counted)
    cache, failures = build_clip_latent_cache(catalog, lambda px: (px, torch.zeros_like(px)), "vae", to_disk=False)
    assert not failures and opened.count("a.mp4") == 1
    a_windows = [c for c in catalog.clips if c.path.name == "a.mp4"]
    assert len(a_windows) == 3 + 4  # 9 frames from 0, 4, 8; 5 frames from 0, 4, 8, 12
    for clip in a_windows:
        assert torch.equal(cache.get(clip)[0], clip_pixels(clip))
