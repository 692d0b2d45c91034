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
    ("a.mp4", 17, 16, "mpeg4"), ("b.gif", 9, 10, "gif"), ("c.webm", 13, 24, "libvpx"), ("d.avi", 11, 8, "mpeg4")])
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
    with pytest.raises(ClipError, match="needs frame 20"):
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
