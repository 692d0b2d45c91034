"""Video clips in a dataset opened for editing: which files of a folder are clips, the frames each window of a
video run takes from one (with musubi-tuner's dataset keys: a dataset TOML's, else its defaults), and its poster
frame. Torch-free (PyAV decodes)."""
from __future__ import annotations

from pathlib import Path

from PIL import Image

from trainers.data.clips import ClipInfo, is_video_file, read_frames
from trainers.data.frames import frame_indices, target_lengths
from trainers.data.video_toml import DEFAULTS, VideoDatasetSpec

# The frame rule of the video families trained here (Wan, HunyuanVideo: 1 + 4k frames after their causal VAE).
FRAME_RULE = 4


def clip_files(folder: Path) -> list[Path]:
    """The video files directly in `folder`, in name order (a video_directory is not searched below)."""
    try:
        return sorted((p for p in folder.iterdir() if p.is_file() and is_video_file(p)), key=lambda p: p.name)
    except OSError:
        return []


def folder_spec(folder: Path) -> VideoDatasetSpec:
    """How a video run reads a plain folder of clips: musubi-tuner's defaults (one frame unless target_frames says
    more: the Dataset tab then says so)."""
    return VideoDatasetSpec(label=folder.name, is_image=False, directory=folder, jsonl=None,
                            resolution=DEFAULTS["resolution"])


def windows_line(info: ClipInfo, spec: VideoDatasetSpec) -> str:
    """What the clip is and what a video run takes from it: "3.2 s at 24 fps, 77 frames, 320x240; takes frames 0-32
    (head)", or why it gives nothing."""
    rate = f"{info.duration:.1f} s at {info.fps:g} fps, " if info.fps and info.duration is not None else ""
    head = f"{rate}{info.frames} frames, {info.size[0]}x{info.size[1]}"
    taken = frame_indices(info.frames, spec.target_frames, spec.frame_extraction, spec.frame_stride,
                          spec.frame_sample, spec.max_frames, spec.source_fps, None, FRAME_RULE)
    if not taken:
        lengths = ", ".join(map(str, target_lengths(spec.target_frames, FRAME_RULE)))
        return f"{head}; shorter than every target_frames length ({lengths}): a video run skips it"
    shown = [f"{w[0]}-{w[-1]}" if len(w) > 1 else str(w[0]) for w in taken[:3]]
    more = f" and {len(taken) - 3} more" if len(taken) > 3 else ""
    return (f"{head}; takes frames {', '.join(shown)}{more} ({len(taken)} window(s), "
            f"{spec.frame_extraction}, target_frames {list(spec.target_frames)})")


def poster_frame(clip: Path) -> Image.Image:
    """The clip's first frame (what the Dataset tab and the compare grid show for it); ClipError when it does not
    decode."""
    return Image.fromarray(read_frames(clip, [0])[0])
