"""Torch side of the data: the epoch's sample order and per-sample randomness.

Every random choice about a sample (crop, flip, noise, timestep) comes from a generator
seeded by (seed, epoch, sample index), never from a per-process stream, so the result does
not depend on how samples are spread over processes.
"""
from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils.data import Dataset, Sampler

from .images import load_image_rgb, prepare_image
from .kohya_folders import DatasetScan, ImageItem


def sample_generator(seed: int, epoch: int, index: int, stream: str) -> torch.Generator:
    """A generator owned by one sample of one epoch; `stream` separates independent uses."""
    digest = hashlib.blake2b(f"{seed}:{epoch}:{index}:{stream}".encode(), digest_size=8).digest()
    return torch.Generator().manual_seed(int.from_bytes(digest, "little") & (2**63 - 1))


def expand_repeats(scan: DatasetScan) -> list[ImageItem]:
    """Each image as many times as its folder's repeats: one epoch's samples."""
    return [item for subset in scan.subsets for _ in range(subset.repeats) for item in subset.images]


class EpochSampler(Sampler[tuple[int, int]]):
    """Yields (epoch, sample index) in an order shuffled from seed + epoch."""

    def __init__(self, num_samples: int, seed: int, shuffle: bool = True) -> None:
        self.num_samples = num_samples
        self.seed = seed
        self.shuffle = shuffle
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        return self.num_samples

    def __iter__(self) -> Iterator[tuple[int, int]]:
        if self.shuffle:
            order = torch.randperm(self.num_samples, generator=torch.Generator().manual_seed(self.seed + self.epoch))
        else:
            order = torch.arange(self.num_samples)
        return iter([(self.epoch, int(i)) for i in order])


@dataclass
class ImageOptions:
    width: int
    height: int
    random_crop: bool
    flip_aug: bool
    seed: int


class CaptionedImages(Dataset):
    """One epoch's samples: pixels in [-1, 1], token ids per tokenizer, and SDXL size conditioning."""

    def __init__(self, samples: list[ImageItem], tokenize: Callable[[list[str]], list[torch.Tensor]],
                 options: ImageOptions) -> None:
        self.samples = samples
        self.tokenize = tokenize
        self.options = options

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, key: tuple[int, int]) -> dict[str, Any]:
        epoch, index = key
        item = self.samples[index]
        o = self.options
        gen = sample_generator(o.seed, epoch, index, "augment")
        flip = o.flip_aug and bool(torch.rand((), generator=gen) < 0.5)
        prepared = prepare_image(load_image_rgb(item.path), o.width, o.height, o.random_crop, gen, flip)
        return {
            "pixels": prepared.pixels,
            "input_ids": [ids[0] for ids in self.tokenize([item.caption])],
            "original_size": torch.tensor(prepared.original_size),
            "crop_top_left": torch.tensor(prepared.crop_top_left),
            "target_size": torch.tensor(prepared.target_size),
            "key": torch.tensor([epoch, index]),
        }


def collate(samples: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "pixels": torch.stack([s["pixels"] for s in samples]),
        "input_ids": [torch.stack(ids) for ids in zip(*(s["input_ids"] for s in samples))],
        "original_size": torch.stack([s["original_size"] for s in samples]),
        "crop_top_left": torch.stack([s["crop_top_left"] for s in samples]),
        "target_size": torch.stack([s["target_size"] for s in samples]),
        "keys": torch.stack([s["key"] for s in samples]),
    }
