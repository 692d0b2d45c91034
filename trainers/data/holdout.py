"""The validation split (validation_split, validation_seed) as sd-scripts makes it. Torch-free.

Each subset's images are shuffled with their own `random.Random(seed)` (the same permutation sd-scripts'
split_train_val draws after `random.seed(seed)`, as a shuffle's permutation depends only on the length)
and the last round(n x split) are held out. Regularization subsets are never split. Held-out images are
scored as they are: no flip, crop, color or caption augmentation.
"""
from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import replace
from typing import Any, TypeVar

from trainers.data.specs import SubsetSpec

T = TypeVar("T")


def held_out_count(images: int, split: float) -> int:
    """Images of a subset of `images` held out for validation (Python's round, as sd-scripts)."""
    return round(images * split) if split > 0 else 0


def split_images(items: list[T], split: float, seed: int) -> tuple[list[T], list[T]]:
    """(the images trained on, in their order; the held-out images, in shuffled order).

    sd-scripts trains on the first ceil(n x (1 - split)) of the shuffled list, which overlaps the held-out
    ones when n x split rounds up; here training keeps exactly the others, so the two never share an image.
    """
    count = held_out_count(len(items), split)
    if not count:
        return list(items), []
    order = list(range(len(items)))
    random.Random(seed).shuffle(order)
    held = order[len(items) - count:]
    chosen = set(held)
    return [item for i, item in enumerate(items) if i not in chosen], [items[i] for i in held]


def without_augmentation(spec: SubsetSpec) -> SubsetSpec:
    """A subset as the validation loss reads it: no flip, random crop, color jitter, tag shuffle, dropout or
    token warmup (wildcards still pick one variant, the same every time)."""
    captions = replace(spec.captions, shuffle_p=0.0, dropout_rate=0.0, tag_dropout_rate=0.0, token_warmup_step=0)
    return replace(spec, flip_aug=False, random_crop=False, color_aug=False, captions=captions)


def validation_seed(values: Mapping[str, Any]) -> int:
    """The run's validation seed: validation_seed, else seed (sd-scripts' fallback)."""
    chosen = values.get("validation_seed")
    return int(values.get("seed", 0) if chosen is None else chosen)
