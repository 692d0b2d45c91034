"""Torch side of video data: one window of a clip, ready for the loss.

An item's pixels are (F, C, H, W) floats in [-1, 1]: each frame resized to cover its bucket and center-cropped as an
image is (images.prepare_image; musubi-tuner also center-crops), an image as F = 1. With a ClipLatentCache
(video_cache.py) an item carries the cached latent distribution instead (and the family's cached extras of the window,
`cached_<name>`). A family that trains the clips' sound (`ClipSound`, clip_audio.py) gets each uncached window's
waveform as `sound` (channels, samples) and whether the clip has any as `sound_present`. Captions are used as written (musubi-tuner's video datasets have no caption shuffling or dropout).
A clip that passed the catalog's probe but fails to decode is replaced by another window of the same bucket and
reported in the batch's "problems", as images are.
"""
from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import torch
from PIL import Image
from torch.utils.data import Dataset

from trainers.data.clip_audio import ClipSound, window_sound
from trainers.data.clips import ClipError, read_frames
from trainers.data.dataset import bucket_candidates
from trainers.data.images import ImageLoadError, load_image, prepare_image
from trainers.data.video_catalog import CatalogClip, VideoCatalog

EXTRA = "cached_"  # an item's (and batch's) name of a window's cached extra (video_cache.WindowExtras): cached_<name>


def clip_frames(clip: CatalogClip) -> list[Image.Image]:
    """The window's frames as RGB images (an image: itself); ClipError when they do not decode."""
    if clip.is_image:
        try:
            return [load_image(clip.path)]
        except ImageLoadError as err:
            raise ClipError(clip.path, err.reason) from None
    return [Image.fromarray(frame) for frame in read_frames(clip.path, clip.frames)]


def clip_pixels(clip: CatalogClip) -> torch.Tensor:
    """(F, 3, H, W) in [-1, 1] at the clip's bucket."""
    width, height = clip.bucket
    return torch.stack([prepare_image(frame, width, height).pixels for frame in clip_frames(clip)])


class ClipWindows(Dataset):
    """The video catalog's samples: pixels (or cached latents), token ids (or cached text-encoder outputs), the
    per-sample key and loss weight. `key`: (epoch, index, padding flag[, loss scale]) as the bucket sampler lists."""

    def __init__(self, catalog: VideoCatalog, tokenize: Callable[[list[str]], list[Any]], latents: Any = None,
                 texts: Any = None, sound: ClipSound | None = None) -> None:
        self.catalog = catalog
        self.sound = sound  # read beside uncached pixels (cached latents hold what the family made of it)
        self.tokenize = tokenize
        self.latents = latents  # a ClipLatentCache, or None: decode every step
        self.texts = texts  # a TextCache, or None
        self.bucket_members: dict[Any, list[int]] = {}
        self.position: list[int] = []
        for index in range(len(catalog.samples)):
            members = self.bucket_members.setdefault(catalog.bucket_of(index), [])
            self.position.append(len(members))
            members.append(index)

    def __len__(self) -> int:
        return len(self.catalog.samples)

    def __getitem__(self, key: tuple) -> dict[str, Any]:
        epoch, index, padding, *scale = key
        problems: list[str] = []
        for alternative in self._candidates(index):
            try:
                sample = self._sample(alternative)
            except ClipError as err:
                problems.append(f"{err.path}: {err.reason}")
                continue
            weight = (0.0 if padding else 1.0) * (scale[0] if scale else 1.0)
            return {**sample, "key": torch.tensor([epoch, alternative]), "loss_weight": torch.tensor(weight),
                    "problems": problems}
        raise RuntimeError("could not load any clip of this bucket; last problems:\n" + "\n".join(problems))

    def _candidates(self, index: int) -> Iterator[int]:
        return bucket_candidates(self.catalog, self.bucket_members, self.position, index)

    def _sample(self, index: int) -> dict[str, Any]:
        clip = self.catalog.clips[self.catalog.samples[index]]
        out: dict[str, Any] = {}
        if self.latents is not None:
            entry = self.latents.entry(clip)
            out.update(latent_mean=entry.pop("mean"), latent_std=entry.pop("std"))
            out.update({EXTRA + name: tensor for name, tensor in entry.items()})
        else:
            out["pixels"] = clip_pixels(clip)
            if self.sound is not None:
                wave, present = window_sound(clip, self.sound)
                out.update(sound=torch.from_numpy(wave), sound_present=torch.tensor(float(present)))
        if self.texts is not None:
            hidden, pooled = self.texts.get(clip.caption)
            out["prompt_embeds"] = hidden
            if pooled is not None:
                out["pooled_embeds"] = pooled
        else:
            out["input_ids"] = [ids[0] for ids in self.tokenize([clip.caption])]
        return out


def collate_clips(samples: list[dict[str, Any]]) -> dict[str, Any]:
    """A batch of one bucket: pixels (B, F, C, H, W), or the latents' mean and std (and the cached extras)."""
    first = samples[0]
    extras = [name for name in first if name.startswith(EXTRA)]
    out: dict[str, Any] = {name: torch.stack([s[name] for s in samples]) for name in (
        "pixels", "latent_mean", "latent_std", "prompt_embeds", "pooled_embeds", "sound", "sound_present", *extras)
        if name in first}
    if "input_ids" in first:
        out["input_ids"] = [torch.stack(ids) for ids in zip(*(s["input_ids"] for s in samples))]
    out["keys"] = torch.stack([s["key"] for s in samples])
    out["loss_weights"] = torch.stack([s["loss_weight"] for s in samples])
    out["problems"] = [p for s in samples for p in s["problems"]]
    return out


def frames_as_uint8(pixels: torch.Tensor) -> np.ndarray:
    """(F, C, H, W) in [-1, 1] back to (F, H, W, 3) uint8: for previews and tests."""
    return ((pixels.clamp(-1, 1) + 1) * 127.5).round().to(torch.uint8).permute(0, 2, 3, 1).numpy()
