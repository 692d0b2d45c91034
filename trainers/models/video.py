"""The video layer of the model families: what a video family adds to its image half (VideoFamily, mixed in before
FlowFamily), its samples as short clips (decoded frames written as an H.264 mp4 by PyAV at the family's frame rate,
the sample's A1111 parameters in the container's comment, atomically: a reader never sees half a file), and images
encoded by its 3D autoencoder as 1-frame clips. Its torch-free half is the rules' is_video / frame_rule / frame_rate
and trainers/models/video_data.py (which runs read clips)."""
from __future__ import annotations

import types
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from trainers.core.fsio import atomic_path
from trainers.data.clip_audio import ClipSound
from trainers.data.video_cache import WindowExtras

CODECS = ("libx264", "mpeg4")  # H.264 plays in every browser; mpeg4 where this PyAV build lacks it
AUDIO_CODEC = "aac"  # FFmpeg's own AAC encoder: mp4's usual sound, in every build


def write_mp4(frames: np.ndarray, path: Path, fps: float, parameters: str = "",
              sound: tuple[np.ndarray, int] | None = None) -> Path:
    """Write `frames` (F, H, W, 3) uint8 as `path` (an .mp4); sides are cut to even numbers (yuv420p). `sound`:
    (waveform (channels, samples) float in [-1, 1], samples a second), muxed as an AAC track. Returns it."""
    import av

    height, width = frames.shape[1] // 2 * 2, frames.shape[2] // 2 * 2
    codec = next(c for c in CODECS if c in av.codecs_available)
    with atomic_path(path) as tmp:
        with av.open(str(tmp), "w", format="mp4") as container:
            if parameters:
                container.metadata["comment"] = parameters
            stream = container.add_stream(codec, rate=round(fps))
            stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
            audio = _sound_stream(container, sound) if sound is not None else None
            for frame in frames[:, :height, :width]:
                for packet in stream.encode(av.VideoFrame.from_ndarray(np.ascontiguousarray(frame), format="rgb24")):
                    container.mux(packet)
            for packet in stream.encode():
                container.mux(packet)
            if audio is not None and sound is not None:
                _write_sound(container, audio, *sound)
    return path


def _sound_stream(container: Any, sound: tuple[np.ndarray, int]) -> Any:
    wave, rate = sound
    stream = container.add_stream(AUDIO_CODEC, rate=int(rate))
    stream.layout = "mono" if wave.shape[0] == 1 else "stereo"
    return stream


def _write_sound(container: Any, stream: Any, wave: np.ndarray, rate: int) -> None:
    import av

    data = np.clip(np.asarray(wave, np.float32), -1, 1)[:2]
    step = 1024  # AAC's frame
    for start in range(0, data.shape[1], step):
        frame = av.AudioFrame.from_ndarray(np.ascontiguousarray(data[:, start:start + step]), format="fltp",
                                           layout=stream.layout.name)
        frame.sample_rate, frame.pts = int(rate), start
        for packet in stream.encode(frame):
            container.mux(packet)
    for packet in stream.encode():
        container.mux(packet)


class VideoFamily:
    """Mixin of the video families: samples are mp4 clips of `sample_frames` frames at the rules' frame_rate."""

    sample_frames: int = 17  # 1 + 4k: about a second at 16 fps
    sample_suffix = ".mp4"
    frame_rate: float

    def sample_output(self, pipe: Any, pixels: torch.Tensor) -> Any:
        """The first sample's frames (F, H, W, 3) uint8, as diffusers' video pipelines post-process them."""
        frames = pipe.video_processor.postprocess_video(pixels.float(), output_type="np")[0]
        return (np.clip(frames, 0, 1) * 255).round().astype(np.uint8)

    def save_sample(self, sample: Any, path: Path, parameters: str) -> Path:
        return write_mp4(sample, path, self.frame_rate, parameters)

    def clip_sound(self, model: Any) -> ClipSound | None:
        """What a family that trains an audio stream reads of each window's sound (uncached batches carry it as
        `sound` and `sound_present`; cached latents hold what its window_extras made of it); None: no sound."""
        return None

    def window_extras(self, model: Any) -> WindowExtras | None:
        """What the latent cache keeps of each window beside its latents, read back as the batch's `cached_<name>`
        (an image-to-video family's first-frame condition); None: nothing."""
        return None


def frame_kwargs(family: Any, frames: int | None) -> dict[str, Any]:
    """The pipeline call's clip length of a video family (`frames`: a prompt's --f or Generate's frames; None: its
    sample_frames), merged over its pipeline_kwargs; nothing for an image family. A length its causal VAE cannot
    make (not 1 + frame_rule x k) is refused by name rather than rounded, as diffusers' pipelines would."""
    if not getattr(family, "is_video", False):
        return {}
    count = frames or family.sample_frames
    if (count - 1) % family.frame_rule:
        lower = count - (count - 1) % family.frame_rule
        raise ValueError(f"frames: {family.title} makes clips of 1 + {family.frame_rule}k frames; {count} is not "
                         f"one (e.g. {lower} or {lower + family.frame_rule})")
    return {"num_frames": count}


def encode_images_as_frames(vae: nn.Module) -> None:
    """Make a 3D autoencoder encode images (B, C, H, W) as 1-frame clips, their distribution (B, C', 1, h, w): what
    the image datasets and their latent caches give it (the instance's method: the saved model is unchanged). Clips
    come as (B, C, F, H, W), which it encodes as it does."""
    encode_video = vae.encode

    def encode(self: nn.Module, pixels: torch.Tensor, return_dict: bool = True) -> Any:
        return encode_video(pixels.unsqueeze(2) if pixels.ndim == 4 else pixels, return_dict=return_dict)

    vae.encode = types.MethodType(encode, vae)
