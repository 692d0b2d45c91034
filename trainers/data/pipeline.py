"""From the catalog to the data loader, once the model is loaded: caches, dataset, bucket batches."""
from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from trainers.core.events import Cache, EventWriter
from trainers.core.options import ConfigError, ConfigIssue, TrainConfig
from trainers.data.buckets import BucketBatchSampler
from trainers.data.cache import CacheWriteError, Dist, build_latent_cache, build_text_cache
from trainers.data.catalog import Catalog
from trainers.data.dataset import CaptionedImages, collate


@dataclass
class DataPipeline:
    catalog: Catalog
    dataset: CaptionedImages
    sampler: BucketBatchSampler
    loader: Any


def build_pipeline(cfg: TrainConfig, catalog: Catalog, model: Any, accelerator: Any, events: EventWriter) -> DataPipeline:
    main = accelerator.is_main_process
    latents = None
    if cfg.cache_latents or cfg.cache_latents_to_disk:
        try:
            latents, failed = build_latent_cache(
                catalog, model.vae, cfg.cache_latents_to_disk, cfg.train_batch_size, Dist.of(accelerator),
                _progress("latents", main, events), workers=max(1, cfg.max_data_loader_n_workers))
        except CacheWriteError as err:
            raise ConfigError([ConfigIssue("cache_latents_to_disk", f"{err}: make that folder writable, or cache in "
                                           "memory (cache_latents = true, cache_latents_to_disk = false)",
                                           "dataset")]) from None
        if failed:
            for index, reason in failed.items():
                events.warn(f"skipped {catalog.images[index].path}: {reason}")
            catalog = catalog.without(failed)
    dataset = CaptionedImages(catalog, lambda caps: model.family.tokenize(model.tokenizers, caps), cfg.seed,
                              cfg.prior_loss_weight, latents)
    if cfg.cache_text_encoder_outputs:
        dataset.texts = build_text_cache([dataset.caption(0, i) for i in range(len(dataset))],
                                         _text_encoder(model, cfg.clip_skip), progress=_progress("text", main, events))
        for te in model.text_encoders:
            te.to("cpu")  # not needed any more: free the accelerator's memory
    sampler = catalog.batch_sampler(accelerator.num_processes, cfg.seed, keep_global_batch=cfg.keep_global_batch)
    workers = cfg.max_data_loader_n_workers
    loader = torch.utils.data.DataLoader(
        dataset, batch_sampler=sampler, collate_fn=collate, num_workers=workers, persistent_workers=workers > 0,
        pin_memory=accelerator.device.type == "cuda",
    )
    return DataPipeline(catalog, dataset, sampler, loader)


def _text_encoder(model: Any, clip_skip: int) -> Callable[[list[str]], tuple[torch.Tensor, torch.Tensor | None]]:
    device = next(model.text_encoders[0].parameters()).device

    def encode(captions: list[str]) -> tuple[torch.Tensor, torch.Tensor | None]:
        ids = [t.to(device) for t in model.family.tokenize(model.tokenizers, captions)]
        return model.family.encode_prompts(model.text_encoders, ids, clip_skip)

    return encode


def _progress(what: str, enabled: bool, events: EventWriter) -> Callable[[int, int], None]:
    """A terminal bar and `cache` events (at most two a second) for the GUI."""
    from tqdm.auto import tqdm

    bar = None
    last = 0.0

    def update(done: int, total: int) -> None:
        nonlocal bar, last
        if bar is None:
            bar = tqdm(total=total, disable=not enabled, desc=f"caching {what}", dynamic_ncols=True)
        bar.update(done - bar.n)
        now = time.monotonic()
        if done == total or now - last >= 0.5:
            last = now
            events.emit(Cache(what=what, done=done, total=total))
        if done == total:
            bar.close()

    return update
