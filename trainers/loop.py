"""The training loop shared by every method. Methods supply a Trainable; this runs it."""
from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torch import nn

from .diffusion import NoiseOptions, NoisePredictor, diffusion_loss
from .models import LoadedModel
from .sample_hook import sample_hook
from .reporting import Reporter, Saver
from .session import Session
from .optim import build_lr_scheduler, build_optimizer


@dataclass
class Trainable:
    """What a method hands the loop."""

    model: LoadedModel
    predictor: NoisePredictor
    param_groups: list[dict[str, Any]]
    save: Callable[[Path, int, int], None]  # (path, epoch, step): write the method's output file (or folder)
    file_suffix: str = ".safetensors"  # "" when the output is a folder (a diffusers model)
    after_step: Callable[[int], None] | None = None  # (step): after each optimizer update (EMA, freezing a module)
    before_update: Callable[[], None] | None = None  # after backward, before clipping and the optimizer step
    sampling_weights: Callable[[], Any] | None = None  # a context manager factory: weights to sample with (EMA)


def save_name(output_name: str, epoch: int | None = None, step: int | None = None) -> str:
    """kohya's naming: name.safetensors, name-000003.safetensors, name-step00000100.safetensors."""
    if step is not None:
        return f"{output_name}-step{step:08d}"
    return f"{output_name}-{epoch:06d}" if epoch is not None else output_name


class TrainingStopped(Exception):
    """Raised after a requested stop has saved the network; carries the file written."""

    def __init__(self, path: Path) -> None:
        super().__init__(f"stopped on request; saved {path}")
        self.path = path


def train(session: Session, trainable: Trainable) -> Path:
    """Run the whole training and return the final output file."""
    cfg, accelerator, plan = session.cfg, session.accelerator, session.plan
    params = [p for group in trainable.param_groups for p in group["params"]]
    optimizer = build_optimizer(cfg, trainable.param_groups)
    lr_scheduler = build_lr_scheduler(cfg, optimizer, plan.total_steps)
    predictor, optimizer, loader = accelerator.prepare(trainable.predictor, optimizer, session.loader)
    noise = NoiseOptions(cfg.seed, cfg.noise_offset, cfg.min_snr_gamma, trainable.model.prediction_type)
    save = Saver(session, trainable.save, trainable.file_suffix)
    report = Reporter(session, lr_scheduler, trainable.model.family.name, sum(p.numel() for p in params))
    sample = sample_hook(session, trainable.model)
    if sample and trainable.sampling_weights is not None:
        sample = _with_weights(sample, trainable.sampling_weights)
    if sample and cfg.sample_at_first:
        sample(0, 0)
    step, epoch, data_wait = 0, 0, 0.0
    predictor.train()
    report.start_timing()
    for epoch in range(1, plan.epochs + 1):
        session.sampler.set_epoch(epoch - 1)
        for batch, waited in _timed(loader):
            data_wait += waited
            report.unloadable_files(batch.pop("problems", ()))
            with accelerator.accumulate(predictor):
                loss = diffusion_loss(predictor, trainable.model, batch, noise, session.weight_dtype)
                accelerator.backward(loss)
                if trainable.before_update is not None:
                    trainable.before_update()
                if accelerator.sync_gradients and cfg.max_grad_norm:
                    accelerator.clip_grad_norm_(params, cfg.max_grad_norm)
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
            if not accelerator.sync_gradients:
                continue
            lr_scheduler.step()
            step += 1
            if trainable.after_step is not None:
                trainable.after_step(step)
            report.step(step, epoch, loss, data_wait)
            data_wait = 0.0
            requests = session.control.poll()
            if "stop" in requests:
                raise TrainingStopped(save(save_name(cfg.output_name, step=step), epoch, step))
            if "save_now" in requests or _due(cfg.save_every_n_steps, step) and step < plan.total_steps:
                save(save_name(cfg.output_name, step=step), epoch, step)
            if sample and _due(cfg.sample_every_n_steps, step):
                sample(step, epoch)
            if step >= plan.total_steps:
                break
        if _due(cfg.save_every_n_epochs, epoch) and epoch < plan.epochs:
            save(save_name(cfg.output_name, epoch=epoch), epoch, step)
        if sample and _due(cfg.sample_every_n_epochs, epoch):
            sample(step, epoch)
        if step >= plan.total_steps:
            break
    report.close()
    final = save(cfg.output_name, epoch, step, final=True)
    accelerator.end_training()
    return final


def _with_weights(sample: Callable[[int, int], None], weights: Callable[[], Any]) -> Callable[[int, int], None]:
    """Samples made under other weights (e.g. EMA), swapped in and back by the `weights` context."""
    def wrapped(step: int, epoch: int) -> None:
        with weights():
            sample(step, epoch)

    return wrapped


def _due(every: int | None, count: int) -> bool:
    return bool(every) and count % every == 0


def _timed(iterable: Any) -> Any:
    """Yield (item, seconds spent waiting for it): the data-loading share of step time."""
    iterator = iter(iterable)
    while True:
        started = time.perf_counter()
        try:
            item = next(iterator)
        except StopIteration:
            return
        yield item, time.perf_counter() - started


def freeze(*modules: nn.Module) -> None:
    for m in modules:
        m.requires_grad_(False)
        m.eval()
