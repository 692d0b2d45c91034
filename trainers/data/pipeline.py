"""From the catalog to the data loader, once the model is loaded: caches, dataset, bucket batches.

Here the run's view of the model gets its prompt format (max_token_length, weighted_captions), so the dataset's
tokenization, the text-encoder cache and sample images all encode text the same way, and its cached texts.
"""
from __future__ import annotations

import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from trainers.core.events import Cache, EventWriter
from trainers.core.options import ConfigError, ConfigIssue, TrainConfig
from trainers.core.plan import plan_steps
from trainers.core.prompts import config_prompts
from trainers.data.buckets import BucketBatchSampler
from trainers.data.cache import CACHE_DIR, CacheWriteError, Dist, build_latent_cache, build_text_cache
from trainers.data.catalog import Catalog
from trainers.data.dataset import CaptionedImages, StepClock, collate
from trainers.data.holdout import validation_seed
from trainers.data.prompt_chunks import PromptFormat, PromptTruncated

if TYPE_CHECKING:
    from trainers.data.video_dataset import ClipWindows

FULL_CAPTIONS = 2**62  # a step after any token warmup


@dataclass(frozen=True)
class TextPass:
    """How the caption pass (cache_text_encoder_outputs) gets its text encoders: `place` puts them on the device
    (quantized as text_encoder_precision says) before the first caption is encoded, never when every caption is
    cached on disk; `batch_size` is asked then: how many captions to encode at once (the session's: the option, or
    what the device's free memory holds). The default: the text encoders are where they are, TEXT_BATCH_SIZE."""

    place: Callable[[], None] = lambda: None
    batch_size: Callable[[], int] | None = None


@dataclass
class DataPipeline:
    catalog: Catalog  # a video run's: its VideoCatalog (build_video_pipeline; the session wraps it in RunClips)
    dataset: CaptionedImages | ClipWindows
    sampler: BucketBatchSampler
    loader: Any
    model: Any  # the run's view of the model (a LoadedModel): its prompt format, and its cached texts when cached
    validation: CaptionedImages | None = None  # the held-out images (validation_split); latents encoded as needed


def build_pipeline(cfg: TrainConfig, catalog: Catalog, model: Any, accelerator: Any, events: EventWriter,
                   text_pass: TextPass = TextPass()) -> DataPipeline:
    main = accelerator.is_main_process
    model = replace(model, prompt_format=PromptFormat(cfg.max_token_length, cfg.weighted_captions))
    latents = None
    if cfg.cache_latents or cfg.cache_latents_to_disk:
        try:
            latents, failed = build_latent_cache(
                catalog, model.vae, cfg.cache_latents_to_disk, cfg.vae_batch_size or cfg.train_batch_size,
                Dist.of(accelerator),
                _progress("latents", main, events), workers=max(1, cfg.max_data_loader_n_workers))
        except CacheWriteError as err:
            raise _unwritable_cache(err) from None
        if failed:
            for index, reason in failed.items():
                events.warn(f"skipped {catalog.images[index].path}: {reason}")
            catalog = catalog.without(failed)
    sampler = catalog.batch_sampler(accelerator.num_processes, cfg.seed, keep_global_batch=cfg.keep_global_batch)
    dataset = CaptionedImages(catalog, _quiet(model.tokenize), cfg.seed, cfg.prior_loss_weight, latents,
                              clock=_clock(cfg, catalog, sampler, accelerator.num_processes))
    validation, held_out = None, set()
    if catalog.validation is not None:
        validation = CaptionedImages(catalog.validation, _quiet(model.tokenize), validation_seed(cfg.values))
        held_out = {validation.caption(0, i) for i in range(len(validation))}
    # The captions as read once token warmup is over (the text cache refuses warmup: there they are the same).
    captions = sorted({dataset.caption(0, i, step=FULL_CAPTIONS) for i in range(len(dataset))} | held_out)
    if main:
        _warn_overlong(captions, model, events)
    if cfg.cache_text_encoder_outputs:
        on_disk = cfg.values.get("cache_text_encoder_outputs_to_disk") and catalog.images
        folder = catalog.images[0].path.parent / CACHE_DIR / "text" if on_disk else None
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", PromptTruncated)  # reported above
            try:  # the sample prompts too: samples then need no text encoder (they are moved off the device below)
                texts = captions + sample_texts(cfg)
                dataset.texts = build_text_cache(texts, lambda caps: model.encode_texts(caps, cfg.clip_skip),
                                                 text_pass.batch_size or cfg.values.get("text_encoder_batch_size"),
                                                 progress=_progress("text", main, events), folder=folder,
                                                 encoder_key=text_encoder_key(cfg, model) if folder else "",
                                                 prepare=text_pass.place)
            except CacheWriteError as err:
                raise _unwritable_cache(err, "cache_text_encoder_outputs_to_disk", "cache in memory only") from None
        if validation is not None:
            validation.texts = dataset.texts
        model = replace(model, cached_texts=dataset.texts)
        _encoders_off_device(model)
    workers = cfg.max_data_loader_n_workers
    loader = torch.utils.data.DataLoader(
        dataset, batch_sampler=sampler, collate_fn=collate, num_workers=workers,
        persistent_workers=workers > 0 and cfg.persistent_data_loader_workers,
        pin_memory=accelerator.device.type == "cuda",
    )
    return DataPipeline(catalog, dataset, sampler, loader, model, validation)


def build_video_pipeline(cfg: TrainConfig, catalog: Any, model: Any, accelerator: Any,
                         events: EventWriter, text_pass: TextPass = TextPass()) -> DataPipeline:
    """A video family's data (its `is_video`): the video catalog's clip windows (trainers/data/video_catalog.py;
    images as 1-frame clips), batches of one (dataset, frames, width, height) bucket, pixels (B, F, C, H, W) or their
    cached latents (video_cache.py, encoded by the family's 3D autoencoder, with what the family's `window_extras`
    keeps of each window), captions as the image path tokenizes or caches them. What the loop reads of a batch is
    what an image batch has, latents with a frame axis."""
    from trainers.data.video_cache import build_clip_latent_cache
    from trainers.data.video_catalog import VideoCatalog
    from trainers.data.video_dataset import ClipWindows, collate_clips

    main = accelerator.is_main_process
    model = replace(model, prompt_format=PromptFormat(cfg.max_token_length, cfg.weighted_captions))
    latents = None
    if cfg.cache_latents or cfg.cache_latents_to_disk:
        from trainers.data.cache import vae_fingerprint

        vae = model.vae

        def encode(pixels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:  # (B, F, C, H, W), as batches come
            dist = vae.encode(pixels.transpose(1, 2).to(vae.device, vae.dtype)).latent_dist
            return dist.mean, dist.std

        try:
            latents, failed = build_clip_latent_cache(catalog, encode, vae_fingerprint(vae), cfg.cache_latents_to_disk,
                                                      extras=model.family.window_extras(model))
        except CacheWriteError as err:
            raise _unwritable_cache(err) from None
        if failed:
            for index, reason in failed.items():
                events.warn(f"skipped {catalog.clips[index].path}: {reason}")
            kept = [i for i in range(len(catalog.clips)) if i not in failed]
            renumber = {old: new for new, old in enumerate(kept)}
            catalog = VideoCatalog(catalog.datasets, [catalog.clips[i] for i in kept],
                                   [renumber[s] for s in catalog.samples if s in renumber], catalog.skipped,
                                   catalog.warnings)
    sampler = catalog.batch_sampler(accelerator.num_processes, cfg.seed)
    sound = model.family.clip_sound(model)  # a family that trains the clips' sound (cached: in the latents' extras)
    dataset = ClipWindows(catalog, _quiet(model.tokenize), latents, sound=None if latents is not None else sound)
    captions = sorted({clip.caption for clip in catalog.clips})
    if main:
        _warn_overlong(captions, model, events)
        if sound is not None:
            _warn_silent(catalog, model.family.title, events)
    if cfg.cache_text_encoder_outputs:
        first = catalog.datasets[0]  # its folder (a JSONL list's), or its cache_directory, holds the text cache
        base = first.cache_directory or (first.directory if first.directory is not None else first.jsonl.parent)
        folder = base / CACHE_DIR / "text" if cfg.values.get("cache_text_encoder_outputs_to_disk") else None
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", PromptTruncated)  # reported above
            try:
                dataset.texts = build_text_cache(captions + sample_texts(cfg),
                                                 lambda caps: model.encode_texts(caps, cfg.clip_skip),
                                                 text_pass.batch_size or cfg.values.get("text_encoder_batch_size"),
                                                 progress=_progress("text", main, events), folder=folder,
                                                 encoder_key=text_encoder_key(cfg, model) if folder else "",
                                                 prepare=text_pass.place)
            except CacheWriteError as err:
                raise _unwritable_cache(err, "cache_text_encoder_outputs_to_disk", "cache in memory only") from None
        model = replace(model, cached_texts=dataset.texts)
        _encoders_off_device(model)
    workers = cfg.max_data_loader_n_workers
    loader = torch.utils.data.DataLoader(
        dataset, batch_sampler=sampler, collate_fn=collate_clips, num_workers=workers,
        persistent_workers=workers > 0 and cfg.persistent_data_loader_workers,
        pin_memory=accelerator.device.type == "cuda")
    return DataPipeline(catalog, dataset, sampler, loader, model)


def _warn_silent(catalog: Any, title: str, events: EventWriter) -> None:
    """One line per clip without an audio stream, one for the images, when the family trains the clips' sound:
    those windows train with a silent track whose output is not scored."""
    from trainers.data.clip_audio import has_sound

    clips = sorted({clip.path for clip in catalog.clips if not clip.is_image})
    for path in clips:
        if not has_sound(path):
            events.warn(f"{path} has no audio stream: {title} trains its sound with a silent track there, not "
                        "scored (its frames train as usual)")
    images = len({clip.path for clip in catalog.clips if clip.is_image})
    if images:
        events.warn(f"{images} image(s) train as 1-frame clips without sound: {title}'s audio stream gets a silent "
                    "track for them, not scored")


def _encoders_off_device(model: Any) -> None:
    """The text encoders back in host RAM once the captions are encoded: the accelerator's memory is the denoiser's
    next. Those never read (every text was in the disk cache: models/pending_encoders.py) stay unread."""
    for te in model.text_encoders:
        if not getattr(te, "pending", False):
            te.to("cpu")


def sample_texts(cfg: TrainConfig) -> list[str]:
    """The run's sample prompts and negative prompts."""
    prompts = config_prompts(cfg.sample_prompts, cfg.sample_prompt_lines)
    return [text for p in prompts for text in (p.prompt, p.negative)]


def text_encoder_key(cfg: TrainConfig, model: Any) -> str:
    """What a caption's cached outputs depend on besides its text: the text encoders' files (path, size, time),
    their dtype and quantization, and every setting of how captions are tokenized and encoded. Read before the text
    encoders are quantized (the caption pass quantizes them when it first encodes)."""
    source = Path(model.source).expanduser()
    files = [source] if source.is_file() else sorted([*source.glob("text_encoder*/*"), *source.glob("tokenizer*/*")])
    files += [Path(str(cfg.values.get(name))).expanduser() for name in ("clip_l", "clip_g", "t5xxl")
              if str(cfg.values.get(name) or "").strip()]
    versions = [f"{f}|{f.stat().st_size}|{f.stat().st_mtime_ns}" for f in files if f.is_file()]
    first = model.text_encoders[0]  # one not read yet (a stand-in, models/pending_encoders.py) knows its dtype
    dtype = first.dtype if getattr(first, "pending", False) else next(first.parameters()).dtype
    settings: tuple[Any, ...] = (model.family.name, cfg.clip_skip, cfg.max_token_length, cfg.weighted_captions,
                                 str(dtype), repr(getattr(model.family, "settings", "")))
    quantized = str(cfg.values.get("text_encoder_precision") or "none")
    if quantized != "none":  # unquantized encoders keep the key they had before this was part of it
        settings += (f"text_encoder_precision={quantized}",)
    return "|".join([*versions, *map(str, settings)])


def _clock(cfg: TrainConfig, catalog: Catalog, sampler: BucketBatchSampler, processes: int) -> StepClock | None:
    """The step each sample trains at, for token warmup (None when no subset warms up): the run's step plan,
    computed as the session computes it."""
    if not any(sub.captions.token_warmup_step for sub in catalog.subsets):
        return None
    per_device = catalog.per_device_batches(processes, cfg.keep_global_batch)
    plan = plan_steps(len(catalog.samples), per_device[0], processes, cfg.gradient_accumulation_steps,
                      cfg.max_train_epochs, cfg.max_train_steps, batches_per_epoch=sampler.groups_per_epoch(),
                      keep_global_batch=cfg.keep_global_batch)
    return StepClock(sampler, plan.steps_per_epoch, plan.gradient_accumulation_steps, plan.total_steps)


def _quiet(tokenize: Callable[[list[str]], list[Any]]) -> Callable[[list[str]], list[Any]]:
    """The dataset's tokenization, without a truncation warning from every worker (the run warns once)."""
    def run(captions: list[str]) -> list[Any]:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", PromptTruncated)
            return tokenize(captions)

    return run


def _warn_overlong(captions: list[str], model: Any, events: EventWriter) -> None:
    """One warning for the captions longer than max_token_length (as at the first epoch)."""
    fmt = model.prompt_format
    cut = model.family.overlong(model.tokenizers, captions, fmt)
    if cut:
        more = ", or set max_token_length to 150 or 225" if fmt.limit < 225 else ""
        events.warn(f"{len(cut)} caption(s) have more than the {fmt.limit} tokens max_token_length allows and are "
                    f"cut there (shorten them{more}); e.g. {cut[0][:200]!r}")


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


def _unwritable_cache(err: CacheWriteError, field: str = "cache_latents_to_disk",
                      instead: str = "cache in memory (cache_latents = true, cache_latents_to_disk = false)"
                      ) -> ConfigError:
    return ConfigError([ConfigIssue(field, f"{err}: make that folder writable, or {instead}", "dataset")])
