"""Torch side of the data: one sample of the catalog, ready for the loss.

Every random choice about a sample (crop, flip, color, caption variant, noise, timestep) comes from
a generator seeded by (seed, epoch, sample index), never from a per-process stream, so the
result does not depend on how samples are spread over processes. Token warmup needs the step a
sample trains at: `StepClock` computes it from the sample's global batch in the epoch, the same
on every process and in every data-loader worker.

A file that passed the cheap checks but still fails to decode is replaced by another image
of the same bucket (reported in the batch's "problems"), so a run never stops mid-epoch on it.
"""
from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils.data import Dataset

from trainers.data.captions import process_caption
from trainers.data.catalog import Catalog
from trainers.data.images import (
    ImageLoadError,
    PreparedImage,
    alpha_of,
    color_jitter,
    cover_size,
    load_image,
    load_mask,
    prepare_image,
)
from trainers.data.prompt_chunks import WeightedIds
from trainers.data.seeds import sample_seed

MAX_SUBSTITUTES = 8  # other images (clips) of the bucket tried before giving up on a batch


def bucket_candidates(catalog: Any, bucket_members: Any, position: Any, index: int,
                      at_most: int = MAX_SUBSTITUTES) -> Iterator[int]:
    """Sample `index`, then (only if it fails to load) samples of other images or clips of its bucket, the next ones
    after it first: `catalog` has bucket_of and samples, `bucket_members` lists each bucket's samples and `position`
    is each sample's place among them."""
    yield index
    members = bucket_members[catalog.bucket_of(index)]
    start = position[index]
    seen = {catalog.samples[index]}
    for other in members[start + 1:] + members[:start]:
        if len(seen) > at_most:
            return
        if catalog.samples[other] not in seen:
            seen.add(catalog.samples[other])
            yield other


def sample_generator(seed: int, epoch: int, index: int, stream: str) -> torch.Generator:
    """A generator owned by one sample of one epoch; `stream` separates independent uses."""
    return torch.Generator().manual_seed(sample_seed(seed, epoch, index, stream))


def flip_of(flip_aug: bool, seed: int, epoch: int, index: int) -> tuple[bool, torch.Generator]:
    """Whether a sample is flipped this epoch, and its augmentation generator (for the crop)."""
    gen = sample_generator(seed, epoch, index, "augment")
    return flip_aug and bool(torch.rand((), generator=gen) < 0.5), gen


@dataclass
class StepClock:
    """The optimizer step each sample of an epoch trains at: its global batch's place in the epoch (the bucket
    sampler's order, seeded per epoch) over the gradient accumulation, after the earlier epochs' steps."""

    sampler: Any  # a BucketBatchSampler: epoch_groups(epoch) lists the epoch's global batches
    steps_per_epoch: int
    accumulation: int
    total_steps: int  # the run's (token_warmup_step below 1 is a share of it)
    _epoch: int = field(default=-1, repr=False)
    _groups: dict[int, int] = field(default_factory=dict, repr=False)  # sample index -> global batch

    def step(self, epoch: int, index: int) -> int:
        if epoch != self._epoch:
            self._groups = {key[1]: number for number, group in enumerate(self.sampler.epoch_groups(epoch))
                            for batch in group for key in batch if not key[2]}
            self._epoch = epoch
        return epoch * self.steps_per_epoch + self._groups.get(index, 0) // self.accumulation


class CaptionedImages(Dataset):
    """The catalog's samples: pixels in [-1, 1] (or cached latents), token ids (or cached text-encoder
    outputs), SDXL size conditioning, the per-sample key, the loss weight and, for images with a
    loss mask (masked_loss, alpha_mask), the mask.

    `tokenize` gives per tokenizer a batch of ids, or of WeightedIds (weighted captions); `clock`, the step
    each sample trains at, is needed for token warmup only (without it captions are as at step 0)."""

    def __init__(self, catalog: Catalog, tokenize: Callable[[list[str]], list[Any]], seed: int,
                 prior_loss_weight: float = 1.0, latents: Any = None, texts: Any = None,
                 clock: StepClock | None = None) -> None:
        self.catalog = catalog
        self.tokenize = tokenize
        self.seed = seed
        self.prior_loss_weight = prior_loss_weight
        self.latents = latents  # a LatentCache, or None: decode and encode every step
        self.texts = texts  # a TextCache, or None: run the text encoders every step
        self.clock = clock
        self.bucket_members: dict[Any, list[int]] = {}
        self.position: list[int] = []  # of each sample in its bucket's members
        for index in range(len(catalog.samples)):
            members = self.bucket_members.setdefault(catalog.bucket_of(index), [])
            self.position.append(len(members))
            members.append(index)

    def __len__(self) -> int:
        return len(self.catalog.samples)

    def caption(self, epoch: int, index: int, step: int | None = None) -> str:
        """Sample `index`'s caption in `epoch`, at `step` (default: the step it trains at)."""
        image = self.catalog.images[self.catalog.samples[index]]
        opts = self.catalog.subsets[image.subset].captions
        total = 0
        if opts.token_warmup_step and self.clock is not None:
            step = self.clock.step(epoch, index) if step is None else step
            total = self.clock.total_steps
        rng = random.Random(sample_seed(self.seed, epoch, index, "caption"))
        return process_caption(image.caption, opts, rng, step or 0, total)

    def __getitem__(self, key: tuple) -> dict[str, Any]:
        """`key`: (epoch, index, padding flag[, loss scale]) as the bucket sampler lists them."""
        epoch, index, padding, *scale = key
        problems: list[str] = []
        step = self.clock.step(epoch, index) if self.clock is not None else 0
        for alternative in self._candidates(index):
            try:
                sample = self._sample(epoch, alternative, step)
            except ImageLoadError as err:
                problems.append(f"{err.path}: {err.reason}")
                continue
            subset = self.catalog.subset_of(alternative)
            weight = 0.0 if padding else self.prior_loss_weight if subset.is_reg else 1.0
            weight *= scale[0] if scale else 1.0  # a partial global batch: see buckets.py
            return {**sample, "key": torch.tensor([epoch, alternative]), "loss_weight": torch.tensor(weight),
                    "problems": problems}
        raise RuntimeError("could not load any image of this bucket; last problems:\n" + "\n".join(problems))

    def _candidates(self, index: int) -> Iterator[int]:
        return bucket_candidates(self.catalog, self.bucket_members, self.position, index)

    def _sample(self, epoch: int, index: int, step: int) -> dict[str, Any]:
        image = self.catalog.images[self.catalog.samples[index]]
        spec = self.catalog.subsets[image.subset].spec
        flip, gen = flip_of(spec.flip_aug, self.seed, epoch, index)
        out: dict[str, Any] = {}
        if self.latents is not None:
            entry = self.latents.get(image, flip)
            out.update(latent_mean=entry.mean, latent_std=entry.std, original_size=entry.original_size,
                       crop_top_left=entry.crop_top_left, target_size=entry.target_size)
            mask = entry.mask
        else:
            prepared = prepare_sample_image(image, spec.random_crop, gen, flip, alpha_mask=spec.alpha_mask)
            pixels = prepared.pixels
            if spec.color_aug:
                pixels = color_jitter(pixels, sample_generator(self.seed, epoch, index, "color"))
            # What decides the pixels, where they are the same every epoch: the VAE's outputs are then kept.
            same = not (spec.random_crop or spec.color_aug)
            out["pixel_key"] = (str(image.path), image.size, image.bucket, flip, spec.alpha_mask) if same else None
            out.update(pixels=pixels, original_size=torch.tensor(prepared.original_size),
                       crop_top_left=torch.tensor(prepared.crop_top_left),
                       target_size=torch.tensor(prepared.target_size))
            mask = prepared.mask
        if mask is not None:
            out["mask"] = mask
        caption = self.caption(epoch, index, step)
        if self.texts is not None:
            hidden, pooled = self.texts.get(caption)
            out["prompt_embeds"] = hidden
            if pooled is not None:
                out["pooled_embeds"] = pooled
        else:
            out["input_ids"] = [ids[0] for ids in self.tokenize([caption])]
        return out


def prepare_sample_image(image: Any, random_crop: bool, gen: torch.Generator | None, flip: bool,
                         pil: Any = None, mask: Any = None, alpha_mask: bool = False) -> PreparedImage:
    """Fit a catalog image (and its loss mask) to its bucket; `pil` and `mask` are what `decode_sample`
    already gave, else it is called here."""
    width, height = image.bucket
    if pil is None:
        pil, mask = decode_sample(image, alpha_mask)
    drafted = pil.size[0] < image.size[0] and pil.size[1] < image.size[1]
    original = (image.size[1], image.size[0]) if drafted else None
    return prepare_image(pil, width, height, random_crop, gen, flip, original_size=original, mask=mask)


def decode_sample(image: Any, alpha_mask: bool = False) -> tuple[Any, Any]:
    """A catalog image, large JPEGs at a reduced scale that still covers its bucket, and its loss mask:
    its mask file (masked_loss), else its alpha channel (`alpha_mask`; None without one), else None."""
    pil = load_image(image.path, min_side=max(cover_size(*image.size, *image.bucket)), keep_alpha=alpha_mask)
    mask_file = getattr(image, "mask", None)
    if mask_file is not None:
        return pil, load_mask(mask_file)
    return pil, alpha_of(pil) if alpha_mask else None


def collate(samples: list[dict[str, Any]]) -> dict[str, Any]:
    first = samples[0]
    out: dict[str, Any] = {name: torch.stack([s[name] for s in samples]) for name in (
        "pixels", "latent_mean", "latent_std", "original_size", "crop_top_left", "target_size", "prompt_embeds",
        "pooled_embeds") if name in first}
    if "pixel_key" in first:
        out["pixel_keys"] = [s["pixel_key"] for s in samples]
    if "input_ids" in first:
        weighted = bool(first["input_ids"]) and isinstance(first["input_ids"][0], WeightedIds)
        stack = WeightedIds.stack if weighted else torch.stack
        out["input_ids"] = [stack(ids) for ids in zip(*(s["input_ids"] for s in samples))]
    masks = [s.get("mask") for s in samples]
    if any(m is not None for m in masks):  # images without one train whole (as sd-scripts fills in ones)
        like = next(m for m in masks if m is not None)
        out["masks"] = torch.stack([torch.ones_like(like) if m is None else m for m in masks])
    out["keys"] = torch.stack([s["key"] for s in samples])
    out["loss_weights"] = torch.stack([s["loss_weight"] for s in samples])
    out["problems"] = [p for s in samples for p in s["problems"]]
    return out
