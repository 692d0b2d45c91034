"""Aspect-ratio buckets (as sd-scripts makes them) and the batch sampler that keeps batches in one bucket.

Torch-free: the preflight report uses the same code to count buckets and steps.

Multi-process: every step, all processes train batches of the same bucket, and each sample
is trained once an epoch across processes. The sampler forms "global batches" of
batch x processes samples from one bucket and lists them as one per-device batch per process;
accelerate then hands batch k of every group of `num_processes` to process k. A bucket's
last global batch is split evenly; a process that would get nothing gets a padding sample
whose loss weight is 0, so no sample counts twice. In such a partial batch each key also carries
a loss scale (its process's share x processes / samples), so the gradient averaged over the
processes is the mean over the batch's real samples, exactly as one process would train it.
"""
from __future__ import annotations

import math
import random
from collections.abc import Hashable, Iterator
from dataclasses import dataclass

from trainers.data.seeds import sample_seed


@dataclass(frozen=True)
class BucketSettings:
    resolution: tuple[int, int]  # (width, height): the largest area is width x height
    enable: bool = False
    min_reso: int = 256
    max_reso: int = 1024
    steps: int = 64
    no_upscale: bool = False


def bucket_resolutions(settings: BucketSettings) -> list[tuple[int, int]]:
    """sd-scripts' buckets: sides from min to max in `steps`, area up to resolution^2, plus the square."""
    max_w, max_h = settings.resolution
    max_area = max_w * max_h
    step = settings.steps
    side = int(math.sqrt(max_area) // step) * step
    resos = {(side, side)}
    width = settings.min_reso
    while width <= settings.max_reso:
        height = min(settings.max_reso, int((max_area // width) // step) * step)
        if height >= settings.min_reso:
            resos.add((width, height))
            resos.add((height, width))
        width += step
    return sorted(resos)


class BucketChooser:
    """Maps an image size to its bucket (width, height)."""

    def __init__(self, settings: BucketSettings) -> None:
        self.settings = settings
        self.resos = bucket_resolutions(settings) if settings.enable and not settings.no_upscale else []
        self.ratios = [w / h for w, h in self.resos]

    def choose(self, width: int, height: int) -> tuple[int, int] | None:
        """The bucket for an image of this size; None if it is too small for any (bucket_no_upscale)."""
        s = self.settings
        if not s.enable:
            return s.resolution
        ratio = width / height
        if self.resos:  # nearest aspect ratio; the image is resized to cover it
            best = min(range(len(self.resos)), key=lambda i: abs(self.ratios[i] - ratio))
            return self.resos[best]
        # bucket_no_upscale: the image's own size, shrunk to the area and side limits, in whole steps
        max_area = s.resolution[0] * s.resolution[1]
        scale = min(1.0, math.sqrt(max_area / (width * height)), s.max_reso / max(width, height))
        w, h = width * scale, height * scale
        bucket = (int(w) // s.steps * s.steps, int(h) // s.steps * s.steps)
        return bucket if min(bucket) > 0 else None


Key = tuple  # (epoch, sample index, padding flag), plus a loss scale in a bucket's last, partial global batch


class BucketBatchSampler:
    """Per-device batches of sample keys, every batch from one bucket, bucket order shuffled per epoch.

    `buckets[i]` is the bucket of sample i (any hashable); `batch_sizes[bucket]` its per-device batch.
    Deliberately without a `batch_size` attribute: accelerate then shards whole batches as listed.
    """

    def __init__(self, buckets: list[Hashable], batch_sizes: dict[Hashable, int], num_processes: int, seed: int,
                 shuffle: bool = True) -> None:
        self.members: dict[Hashable, list[int]] = {}
        for index, bucket in enumerate(buckets):
            self.members.setdefault(bucket, []).append(index)
        self.order = sorted(self.members, key=repr)
        self.batch_sizes = batch_sizes
        self.num_processes = num_processes
        self.seed = seed
        self.shuffle = shuffle
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def groups_per_epoch(self) -> int:
        """Steps (batches per process) an epoch takes, before gradient accumulation."""
        return sum(math.ceil(len(self.members[b]) / (self.batch_sizes[b] * self.num_processes)) for b in self.order)

    def __len__(self) -> int:
        return self.groups_per_epoch() * self.num_processes

    def __iter__(self) -> Iterator[list[Key]]:
        groups = self.epoch_groups(self.epoch)
        return iter([batch for group in groups for batch in group])

    def epoch_groups(self, epoch: int) -> list[list[list[Key]]]:
        """The epoch's global batches, each a list of `num_processes` per-device batches."""
        rng = random.Random(sample_seed(self.seed, epoch, -1, "buckets"))
        groups: list[list[list[Key]]] = []
        for bucket in self.order:
            indices = list(self.members[bucket])
            if self.shuffle:
                rng.shuffle(indices)
            size = self.batch_sizes[bucket] * self.num_processes
            for start in range(0, len(indices), size):
                groups.append(self._split(indices[start:start + size], epoch, self.batch_sizes[bucket]))
        if self.shuffle:
            rng.shuffle(groups)
        return groups

    def _split(self, chunk: list[int], epoch: int, batch: int) -> list[list[Key]]:
        n = self.num_processes
        if len(chunk) == batch * n:
            return [[(epoch, i, 0) for i in chunk[k * batch:(k + 1) * batch]] for k in range(n)]
        out, start = [], 0
        for k in range(n):  # a bucket's last, partial global batch: spread it evenly
            take = len(chunk) // n + (1 if k < len(chunk) % n else 0)
            # each process averages its own `take` samples, DDP averages the processes: scale to the global mean
            scale = take * n / len(chunk)
            keys = [(epoch, i, 0) if scale == 1 else (epoch, i, 0, scale) for i in chunk[start:start + take]]
            out.append(keys or [(epoch, chunk[0], 1)])
            start += take
        return out


FrameBucket = tuple[int, int, int]  # (frames, width, height): a video bucket; an image trains as frames = 1


class AreaBucketChooser:
    """musubi-tuner's BucketSelector (video datasets): buckets of the resolution's area, sides in `steps` from half
    the square's side; the nearest aspect ratio wins; with `no_upscale` a frame no larger than the area keeps its
    size, rounded down to `steps`. Without `enable` every clip trains at the resolution."""

    def __init__(self, resolution: tuple[int, int], enable: bool = False, no_upscale: bool = False,
                 steps: int = 16) -> None:
        self.resolution, self.area, self.steps = resolution, resolution[0] * resolution[1], steps
        self.no_upscale = enable and no_upscale
        if not enable:
            self.resos = [resolution]
        else:
            side = int(math.sqrt(self.area))
            found = set()
            for w in range(_down(side // 2, steps), side + steps, steps):
                h = _down(self.area // w, steps)
                found |= {(w, h), (h, w)}
            self.resos = sorted(found)
        self.ratios = [w / h for w, h in self.resos]

    def choose(self, width: int, height: int) -> tuple[int, int] | None:
        """(width, height) a frame of this size trains at; None if it rounds to nothing (no_upscale, tiny frames)."""
        if self.no_upscale and width * height <= self.area:
            bucket = (_down(width, self.steps), _down(height, self.steps))
            return bucket if min(bucket) > 0 else None
        ratio = width / height
        return self.resos[min(range(len(self.resos)), key=lambda i: abs(self.ratios[i] - ratio))]


def _down(value: int, step: int) -> int:
    return value - value % step
