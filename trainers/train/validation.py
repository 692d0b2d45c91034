"""The validation loss: the training objective on the held-out images (validation_split), as sd-scripts'
train_network.py computes it.

Each held-out image is scored at 4 fixed timesteps spread over [min_timestep, max_timestep] with the
training loss (noise offset, min-SNR and the other weightings included), without gradients, with the
predictor in eval mode (LoRA dropouts off) and the optimizer's averaged weights (schedule-free; the pause
does that). Noise comes from validation_seed per (timestep, image), so the same weights give the same
number every time and on any number of processes. Latents are encoded on the fly, once per batch (the
held-out images are not in the latent cache). Processes share the batches and average their sums.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any

import torch
from torch import nn

from trainers.core.events import Validation
from trainers.core.options.typed import DatasetOptions, LoggingOptions, OptimizerOptions
from trainers.data.catalog import Catalog
from trainers.data.dataset import CaptionedImages, collate
from trainers.models import LoadedModel
from trainers.train.diffusion import NoiseOptions, diffusion_loss
from trainers.train.latents import latent_distribution
from trainers.train.progress import ProgressMeter
from trainers.train.session import Session

NUM_TIMESTEPS = 4  # sd-scripts' NUM_VALIDATION_TIMESTEPS


def validation_timesteps(min_timestep: int | None, max_timestep: int | None, num_train_timesteps: int) -> list[int]:
    """The 4 inner points of 6 evenly spaced over the timestep range, truncated to whole timesteps (as numpy's
    linspace with an integer dtype gives them): 200, 400, 600, 800 for the full 1000."""
    low = 0 if min_timestep is None else min_timestep
    high = num_train_timesteps if max_timestep is None else max_timestep
    step = (high - low) / (NUM_TIMESTEPS + 1)
    return [int(k * step + low) for k in range(1, NUM_TIMESTEPS + 1)]


def validation_batches(catalog: Catalog, batch_sizes: list[int]) -> list[list[int]]:
    """The held-out samples in batches of their dataset's per-device batch size, each batch from one bucket, in a
    fixed order (buckets sorted, samples in catalog order)."""
    members: dict[tuple[int, int, int], list[int]] = {}
    for index in range(len(catalog.samples)):
        members.setdefault(catalog.bucket_of(index), []).append(index)
    batches = []
    for bucket in sorted(members):
        size = batch_sizes[bucket[0]]
        batches += [members[bucket][start:start + size] for start in range(0, len(members[bucket]), size)]
    return batches


def shard(batches: list[list[int]], rank: int, world: int,
          max_steps: int | None = None) -> list[tuple[list[int], bool]]:
    """(batch, counted) for process `rank`: every world-th batch, at most `max_steps` of them (sd-scripts'
    max_validation_steps counts the batches of each process), then repeats of a batch that is not counted,
    so that every process runs as many forward passes (and collectives, under FSDP) as the others."""
    if max_steps:
        batches = batches[:max_steps * world]
    rounds = math.ceil(len(batches) / world)
    own = [(batch, True) for batch in batches[rank::world]]
    return own + [(batches[0], False)] * (rounds - len(own))


def encoded(batch: dict[str, Any], model: LoadedModel) -> dict[str, Any]:
    """The batch with its images' latent distribution in place of pixels (encoded once for all timesteps)."""
    if "pixels" not in batch:
        return batch
    mean, std = latent_distribution(model, batch)
    rest = {k: v for k, v in batch.items() if k != "pixels"}
    return {**rest, "latent_mean": mean, "latent_std": std}


def batch_losses(predictor: nn.Module, model: LoadedModel, batch: dict[str, Any], noise: NoiseOptions,
                 timesteps: list[int], weight_dtype: torch.dtype) -> Iterator[torch.Tensor]:
    """The batch's training loss at each of `timesteps` (noise seeded by (timestep number, sample index))."""
    batch = encoded(batch, model)
    for number, t in enumerate(timesteps):
        keys = batch["keys"].clone()
        keys[:, 0] = number
        forced = replace(noise, min_timestep=t, max_timestep=t)  # a [t, t] range draws t (as sd-scripts forces it)
        yield diffusion_loss(predictor, model, {**batch, "keys": keys}, forced, weight_dtype)


class Validator:
    """Computes the validation loss of the predictor's current weights: (step, epoch, kind) -> the loss, the same
    number on every process; rank 0 reports it (a `validation` event, TensorBoard)."""

    def __init__(self, predictor: nn.Module, model: LoadedModel, dataset: CaptionedImages, noise: NoiseOptions,
                 weight_dtype: torch.dtype, batch_sizes: list[int], rank: int = 0, world: int = 1,
                 max_steps: int | None = None, reduce_sum: Callable[[torch.Tensor], torch.Tensor] = lambda t: t,
                 workers: int = 0, report: Callable[[float, int, int, int, str], None] | None = None) -> None:
        """`dataset`: the held-out images, whose seed (validation_seed, else seed) also seeds the noise;
        `batch_sizes`: per dataset, the per-device batch; `reduce_sum`: the sum over processes;
        `report(loss, batches, step, epoch, kind)`: what is done with each result."""
        self.predictor, self.model, self.weight_dtype = predictor, model, weight_dtype
        self.noise = replace(noise, seed=dataset.seed)
        num_train = getattr(model.noise_scheduler.config, "num_train_timesteps", 1000)
        self.timesteps = validation_timesteps(noise.min_timestep, noise.max_timestep, num_train)
        self.plan = shard(validation_batches(dataset.catalog, batch_sizes), rank, world, max_steps)
        self.reduce_sum, self.report = reduce_sum, report
        keys = [[(0, i, 0) for i in batch] for batch, _ in self.plan]
        self.loader = torch.utils.data.DataLoader(dataset, batch_sampler=keys, collate_fn=collate,
                                                  num_workers=min(workers, len(keys)))

    @property
    def batches(self) -> int:
        """Batches this process scores (counted or not) each time."""
        return len(self.plan)

    def loss(self) -> tuple[float, int]:
        """(the mean loss over every held-out sample and timestep, the batches scored on all processes)."""
        device = next(self.model.unet.parameters()).device
        total = torch.zeros(3, dtype=torch.float64, device=device)  # loss x samples, samples, batches
        modes = {m: m.training for m in self.predictor.modules()}
        self.predictor.eval()
        cuda = [device.index or 0] if device.type == "cuda" else []
        try:
            with torch.random.fork_rng(devices=cuda), torch.no_grad():  # training's random streams stay as they were
                for batch, (_, counted) in zip(self.loader, self.plan):
                    batch.pop("problems", None)
                    size = len(batch["keys"])
                    for loss in batch_losses(self.predictor, self.model, batch, self.noise, self.timesteps,
                                             self.weight_dtype):
                        if counted:
                            total[0] += loss.double() * size
                            total[1] += size
                    total[2] += counted
        finally:
            for module, training in modes.items():
                module.train(training)
        total = self.reduce_sum(total)
        return (total[0] / total[1]).item(), int(total[2].item())

    def __call__(self, step: int, epoch: int, kind: str) -> float:
        value, batches = self.loss()
        if self.report is not None:
            self.report(value, batches, step, epoch, kind)
        return value


def validation_hook(session: Session, model: LoadedModel, predictor: nn.Module, noise: NoiseOptions,
                    meter: ProgressMeter) -> Validator | None:
    """The run's validation (a Validator that also reports), or None without held-out images."""
    if session.validation is None:
        return None
    cfg, accelerator = session.cfg, session.accelerator

    def report(value: float, batches: int, step: int, epoch: int, kind: str) -> None:
        if not accelerator.is_main_process:
            return
        smoothed = meter.smoothed_loss
        divergence = None if smoothed is None else value - smoothed
        session.events.emit(Validation(step=step, epoch=epoch, loss=value, kind=kind, batches=batches,
                                       divergence=divergence))
        logs = {f"loss/validation/{kind}_average": value}
        if divergence is not None:
            logs[f"loss/validation/{kind}_divergence"] = divergence
        accelerator.log(logs, step=epoch if kind == "epoch" else step)  # sd-scripts logs epoch values per epoch
        from tqdm.auto import tqdm

        tqdm.write(f"validation loss at step {step} (epoch {epoch}, {kind}): {value:.5f}")

    return Validator(predictor, model, session.validation, noise, session.weight_dtype,
                     session.validation.catalog.per_device_batches(accelerator.num_processes,
                                                                   OptimizerOptions.of(cfg).keep_global_batch),
                     accelerator.process_index, accelerator.num_processes, LoggingOptions.of(cfg).max_validation_steps,
                     lambda t: accelerator.reduce(t, reduction="sum"), DatasetOptions.of(cfg).max_data_loader_n_workers,
                     report)
