"""Everything a run sets up before its method takes over: the same for every method.

Order matters for users: config and dataset problems are reported before any model loads.
"""
from __future__ import annotations

import copy
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, cast

import torch

from trainers.core.errors import ConfigError, ConfigIssue
from trainers.core.events import Dataset, EventWriter
from trainers.core.lifecycle import Lifecycle
from trainers.core.logdir import tensorboard_dir
from trainers.core.options import TrainConfig
from trainers.core.options.typed import (DatasetOptions, LaunchOptions, LoggingOptions, LossOptions, ModelOptions,
                                         OptimizerOptions, PrecisionOptions, SavingOptions)
from trainers.core.overwrites import Outputs
from trainers.core.plan import StepPlan, plan_steps
from trainers.core.registry import method_spec
from trainers.core.weights_memory import GB
from trainers.data.buckets import BucketBatchSampler
from trainers.data.cache import TEXT_BATCH_SIZE
from trainers.data.catalog import Catalog, build_catalog
from trainers.data.dataset import CaptionedImages
from trainers.data.pipeline import TextPass, build_pipeline, build_video_pipeline
from trainers.data.report import catalog_report
from trainers.data.video_catalog import VideoCatalog
from trainers.memory_estimate import base_precision, caption_activations_gb, caption_batch_size, caption_tokens
from trainers.models.video_data import is_video_run, video_run_catalog
from trainers.models import LoadedModel, ModelFiles, load_model, resolve_model_folder
from trainers.models.block_swap import offloaded_blocks, place_with_swap
from trainers.models.checks import model_issues
from trainers.models.distilled import adapter_issues, adapter_path, distilled_notes
from trainers.models.edit_rules import takes_controls
from trainers.models.half_kernels import slow_half_convolutions
from trainers.models.pending_encoders import each_encoder, read_pending
from trainers.models.training_adapter import attach_training_adapter
from trainers.quant.apply import check_platform, quantize_frozen
from trainers.train import memo
from trainers.train.compile import compile_blocks
from trainers.train.control import Control
from trainers.train.distributed import RankTimer
from trainers.train.faults import MemoryTips
from trainers.train.memory_watch import resident_bytes
from trainers.train.optim import check_optimizer


@dataclass
class Session:
    cfg: TrainConfig
    run_dir: Path | None
    events: EventWriter
    accelerator: Any
    catalog: Catalog
    model: LoadedModel  # the run's view of the loaded model (run_model, then build_pipeline's and the memo)
    plan: StepPlan
    loader: Any
    sampler: BucketBatchSampler
    weight_dtype: torch.dtype
    started_at: float
    control: Control
    outputs: Outputs  # every path a final save of the method writes (its rules' outputs: core/overwrites.py)
    memory_tips: MemoryTips  # what the method could change to use less memory (its rules' memory_tips)
    rank_timer: RankTimer | None = None  # this rank's own step time (and DDP's comm hook)
    validation: CaptionedImages | None = None  # the held-out images (validation_split)
    # blocks_to_swap's BlockSwap, or the family's placement (place_denoiser): what keeps weights in CPU memory
    block_swap: Any = None
    resident_before_model: int = 0  # the process's resident bytes before the model loaded (a CPU run's baseline)

    @property
    def memoize_text(self) -> bool:
        """memoize_encoders, and every subset's captions the same each epoch: shuffled or dropped tags seldom come
        again, and a memo would encode them one by one (train/memo.py) and keep them for nothing."""
        return DatasetOptions.of(self.cfg).memoize_encoders and all(subset.captions.is_fixed
                                                                    for subset in self.catalog.subsets)


def start_session(cfg: TrainConfig, run_dir: Path | None, life: Lifecycle | None = None,
                  prepare: Callable[[TrainConfig, Any, EventWriter, torch.dtype], None] | None = None,
                  random_init: bool = False, *, outputs: Outputs, memory_tips: MemoryTips) -> Session:
    """Set the run up for `cfg`'s method, a config that passed Validate's checks (the run's entry checks it
    before torch loads: trainers/preflight/validate.py `check`). `prepare` is its work before the dataset is read
    (Method.prepare); `random_init` builds the model from its configs only (benchmarks of real-size
    architectures); `outputs` names the paths a save of the method writes (what saves must not replace);
    `memory_tips` the method's advice when memory runs out."""
    check_optimizer(cfg)  # a class-path optimizer or lr_scheduler_type imports, and takes its arguments
    model_opts, precision, optimizer = ModelOptions.of(cfg), PrecisionOptions.of(cfg), OptimizerOptions.of(cfg)
    memoize = DatasetOptions.of(cfg).memoize_encoders
    dataset_warnings: list[str] = []
    accelerator = make_accelerator(cfg, run_dir)
    life = life or Lifecycle(run_dir, is_main=accelerator.is_main_process, rank=accelerator.process_index)
    events = life.events
    if prepare is not None:
        prepare(cfg, accelerator, events, weight_dtype_for(precision.mixed_precision))
    # every image (a video family's clip) checked (cheaply) before a model loads
    clips = video_run_catalog(cfg.values, dataset_warnings) if is_video_run(cfg.values) else None
    # a video run's RunClips answers what the report and the run ask of a Catalog
    catalog = (cast(Catalog, clips) if clips is not None else
               build_catalog(cfg.values, dataset_warnings, takes_controls(cfg.values)))
    if accelerator.device.type == "cpu":
        torch.set_flush_denormal(True)  # tiny values would otherwise slow CPU math 5-20x
    life.running()
    if accelerator.is_main_process:
        report = catalog_report(cfg, catalog, accelerator.num_processes, dataset_warnings)
        for warning in report.warnings:
            events.warn(warning)
        events.emit(Dataset(report=report.to_dict(max_listed=200)))
        print(report.text(), flush=True)

    weight_dtype = weight_dtype_for(precision.mixed_precision)
    check_platform(cfg, accelerator.device)  # a quantization this machine cannot do, before the model loads
    resident_before_model = resident_bytes()
    model_path = _checked_model(cfg)
    # texts cached on disk: the text encoders are read only if one is not (every one cached: never)
    deferred = DatasetOptions.of(cfg).cache_text_encoder_outputs and bool(
        cfg.values.get("cache_text_encoder_outputs_to_disk"))
    model = load_model(model_path, model_opts.model_family, weight_dtype, model_opts.vae.strip(), random_init,
                       ModelFiles.from_values(cfg.values), defer_text_encoders=deferred)
    Path(SavingOptions.of(cfg).output_dir).expanduser().mkdir(parents=True, exist_ok=True)  # only once the model loaded
    model = run_model(cfg, model)
    # The caption pass holds the text encoders alone on the device (with cached outputs they leave it after the pass,
    # and they go there only when a caption is not cached on disk): the denoiser stays in host RAM until then, and
    # the VAE, which the pass does not run, waits there too (the latents are cached before it).
    encoders = _TextEncoders(cfg, model, accelerator.device, weight_dtype)
    _place_encoders(precision, model, accelerator.device, weight_dtype)
    if not DatasetOptions.of(cfg).cache_text_encoder_outputs:
        encoders.place()  # with the VAE, before the denoiser: they stay for the steps
    text_pass = TextPass(encoders.place_for_pass, encoders.batch_size)
    if clips is not None and not model.family.is_video:  # a hub id's family is known only now
        raise ConfigError([ConfigIssue("dataset_config", f"clips train only with a video family (docs/video.md), and "
                                       f"{model.family.title} trains on images", "dataset")])
    if clips is not None:  # the clips' windows and latents (a video family's)
        data = build_video_pipeline(cfg, clips.video, model, accelerator, events, text_pass)
        data = replace(data, catalog=cast(Catalog, replace(clips, video=cast(VideoCatalog, data.catalog))))
    else:
        data = build_pipeline(cfg, catalog, model, accelerator, events, text_pass)  # caches, bucket batches, workers
    encoders.settle()
    offloading = bool(cfg.values.get("blocks_to_swap") or cfg.values.get("layer_offload_fraction")
                      or data.model.family.offloads_denoiser)
    base = base_precision(cfg.values)
    if base != "none":  # onto the device, which the text encoders have left (offloaded: in host RAM)
        quantize_frozen(data.model.unet, base, weight_dtype, torch.device("cpu") if offloading else accelerator.device)
    _distilled_base(cfg, data.model, Path(model_path), events, accelerator.is_main_process)  # on the quantized layers
    # The VAE runs once per image (and flip), not once per epoch: for training without cached latents, and for the
    # held-out images, which are never cached.
    model = replace(data.model, latent_memo=memo.RowMemo(memo.LATENT_BYTES) if memoize else None)
    block_swap = _place_denoiser(cfg, precision, model, accelerator.device)
    per_device = data.catalog.per_device_batches(accelerator.num_processes, optimizer.keep_global_batch)
    plan = plan_steps(len(data.catalog.samples), per_device[0], accelerator.num_processes,
                      optimizer.gradient_accumulation_steps, optimizer.max_train_epochs, optimizer.max_train_steps,
                      batches_per_epoch=data.sampler.groups_per_epoch(), keep_global_batch=optimizer.keep_global_batch)
    set_deepspeed_micro_batch(accelerator, plan.per_device_batch)
    from accelerate.utils import set_seed

    set_seed(optimizer.seed)  # the method's new weights (e.g. a LoRA's init) are the same in every run and on every rank
    return Session(cfg, run_dir, events, accelerator, data.catalog, model, plan, data.loader, data.sampler,
                   weight_dtype, time.time(),
                   Control(run_dir, accelerator), outputs, memory_tips, accelerator.rank_timer, data.validation, block_swap,
                   resident_before_model)


def run_model(cfg: TrainConfig, model: LoadedModel) -> LoadedModel:
    """The run's view of the loaded model: its family configured with the run's settings of its text encoding and
    denoiser, and the noise schedule the run trains with (v_parameterization, zero_terminal_snr)."""
    scheduler, prediction_type = model.noise_scheduler, model.prediction_type
    if ModelOptions.of(cfg).v_parameterization:
        scheduler, prediction_type = copy.deepcopy(scheduler), "v_prediction"  # the loaded model's is left as it is
        scheduler.register_to_config(prediction_type="v_prediction")
    if LossOptions.of(cfg).zero_terminal_snr:  # a config field of the schedule: sample images follow it
        from trainers.train.losses import zero_terminal_snr_scheduler

        scheduler = zero_terminal_snr_scheduler(scheduler)
    return replace(model, family=model.family.configured(cfg.values), noise_scheduler=scheduler,
                   prediction_type=prediction_type)


def _checked_model(cfg: TrainConfig) -> str:
    """The model to load: a local one as given (the entry's `check` read its files), a hub id fetched and then
    checked alike."""
    given = ModelOptions.of(cfg).pretrained_model_name_or_path
    if Path(given).expanduser().exists():
        return given
    folder = resolve_model_folder(given)
    issues = model_issues(cfg.values, folder, method_spec(cfg.method).trains) + adapter_issues(cfg.values, folder)
    if issues:
        raise ConfigError(issues)
    return str(folder)


def _distilled_base(cfg: TrainConfig, model: LoadedModel, model_path: Path, events: EventWriter, main: bool) -> None:
    """A distilled base's training adapter hooked onto its denoiser (trainers/models/training_adapter.py), and
    what Validate says about its handling said again in the log (a warning without an adapter)."""
    adapter = adapter_path(cfg.values)
    if adapter is not None:
        attach_training_adapter(model, adapter, float(cfg.values.get("training_adapter_multiplier", 1.0)))
    for note in distilled_notes(cfg.values, model_path) if main else []:
        if adapter is None:
            events.warn(note)
        else:
            print(note, flush=True)


def _place_encoders(precision: PrecisionOptions, model: LoadedModel, device: torch.device,
                    weight_dtype: torch.dtype) -> None:
    """The VAE on the device, before the denoiser (the text encoders go there with _TextEncoders.place): caching
    their outputs then never holds them and the denoiser at once (T5-XXL and FLUX's transformer are 9.5 and 23.8 GB
    in bf16)."""
    if precision.gradient_checkpointing:
        each_encoder(model.text_encoders, lambda te: cast(Any, te).gradient_checkpointing_enable())
    # Some VAEs (SDXL's) overflow in fp16; bf16 has the range, fp32 is the safe default elsewhere.
    keep_vae_fp32 = (precision.no_half_vae or weight_dtype == torch.float16 and model.family.vae_fp16_unsafe
                     or slow_half_convolutions(device, weight_dtype))
    model.vae.to(device, dtype=torch.float32 if keep_vae_fp32 else weight_dtype)


class _TextEncoders:
    """The text encoders quantized (text_encoder_precision) onto the device when they are placed: at once when they
    stay for the steps, else when the caption pass first encodes. When it encodes none (every caption cached on
    disk) they are never placed (nor read: models/pending_encoders.py), and `settle` quantizes them in host RAM once
    read, so what encodes later (a slider's prompts, a new sample prompt, an edit model's pairs) encodes as the cached
    captions were."""

    def __init__(self, cfg: TrainConfig, model: LoadedModel, device: torch.device, weight_dtype: torch.dtype) -> None:
        self.model, self.device, self.weight_dtype = model, device, weight_dtype
        self.mode = str(cfg.values.get("text_encoder_precision") or "none")
        self.given = cfg.values.get("text_encoder_batch_size")
        self.quantized = False
        self.parked_vae: torch.device | None = None  # where the VAE goes back to after the caption pass

    def place(self) -> None:
        read_pending(self.model.text_encoders)  # a caption to encode: deferred encoders are needed now
        self._quantize(self.device)
        for encoder in self.model.text_encoders:
            encoder.to(self.device)

    def place_for_pass(self) -> None:
        """The text encoders onto the device for the caption pass, the VAE off it until `settle`."""
        self.place()
        if self.parked_vae is None:  # (on a CPU run the host is the device: no move)
            self.parked_vae = next(self.model.vae.parameters()).device
            self.model.vae.to("cpu")

    def settle(self) -> None:
        self._quantize(torch.device("cpu"))
        if self.parked_vae is not None:
            self.model.vae.to(self.parked_vae)
            self.parked_vae = None

    def batch_size(self) -> int:
        """Captions the pass encodes at once: text_encoder_batch_size, else what the device's free memory holds."""
        if self.given:
            return int(self.given)
        chosen = _caption_batch(self.model, self.device, self.weight_dtype)
        if self.device.type == "cuda":
            print(f"encoding the captions {chosen} at a time (text_encoder_batch_size unset: what the free memory "
                  "holds)", flush=True)
        return chosen

    def _quantize(self, device: torch.device) -> None:
        if self.mode != "none" and not self.quantized:  # an encoder not read yet: in host RAM when it is
            each_encoder(self.model.text_encoders, lambda encoder: quantize_frozen(
                encoder, self.mode, self.weight_dtype, device))
        self.quantized = True


def _caption_batch(model: LoadedModel, device: torch.device, weight_dtype: torch.dtype) -> int:
    """Captions encoded at once: on a GPU as many as its free memory holds by the estimate of one's activations
    (memory_estimate.caption_activations_gb), else TEXT_BATCH_SIZE."""
    if device.type != "cuda":
        return TEXT_BATCH_SIZE
    free, _ = torch.cuda.mem_get_info(device)
    free += torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)  # the allocator's to reuse
    params = sum(p.numel() for encoder in model.text_encoders for p in encoder.parameters())
    per_caption = caption_activations_gb(params, caption_tokens(model.family.name), weight_dtype.itemsize)
    return caption_batch_size(free / GB, per_caption)


def _place_denoiser(cfg: TrainConfig, precision: PrecisionOptions, model: LoadedModel, device: torch.device
                    ) -> Any:
    if not precision.sdpa:
        from diffusers.models.attention_processor import AttnProcessor

        model.unet.set_attn_processor(AttnProcessor())
    if precision.gradient_checkpointing:
        model.unet.enable_gradient_checkpointing()
    compile_blocks(model.family, model.unet, cfg.values, device.type)  # compiled at their first call (after a LoRA)
    option = "layer_offload_fraction" if cfg.values.get("layer_offload_fraction") else "blocks_to_swap"
    try:
        count = offloaded_blocks(cfg.values, model.unet)
        blocks = model.family.swap_blocks(model.unet, count) if count else []
    except ValueError as err:
        raise ConfigError([ConfigIssue(option, str(err), "precision")]) from None
    if not blocks:
        return model.family.place_denoiser(model.unet, device)
    return place_with_swap(model.unet, blocks, device)


def weight_dtype_for(mixed_precision: str) -> torch.dtype:
    return {"fp16": torch.float16, "bf16": torch.bfloat16}.get(mixed_precision, torch.float32)


def make_accelerator(cfg: TrainConfig, run_dir: Path | None = None) -> Any:
    """The run's Accelerator: DDP buckets, the collective timeout (ddp_timeout), TensorBoard logging (logging_dir,
    else the run folder's logs/)."""
    from accelerate import Accelerator
    from accelerate.utils import ProjectConfiguration

    from trainers.train.distributed import (accelerator_handlers, check_backend_device, check_launch,
                                            hold_process_group, install_rank_timer, shard_cpu_processes)

    check_backend_device(cfg)
    optimizer = OptimizerOptions.of(cfg)
    tensorboard = tensorboard_dir(LoggingOptions.of(cfg).logging_dir, run_dir)
    logging_dir = str(tensorboard) if tensorboard is not None else None
    accelerator = Accelerator(
        mixed_precision=PrecisionOptions.of(cfg).mixed_precision,
        gradient_accumulation_steps=optimizer.gradient_accumulation_steps,
        log_with="tensorboard" if logging_dir else None,
        project_config=ProjectConfiguration(project_dir=logging_dir or ".", logging_dir=logging_dir),
        kwargs_handlers=accelerator_handlers(cfg),
    )
    hold_process_group()
    shard_cpu_processes(cfg, accelerator)
    check_launch(cfg, accelerator)
    accelerator.rank_timer = install_rank_timer(accelerator, LaunchOptions.of(cfg).ddp_gradient_precision)
    return accelerator


def set_deepspeed_micro_batch(accelerator: Any, per_device_batch: int) -> None:
    """DeepSpeed wants the per-device batch; our bucket sampler has no `batch_size` for it to read."""
    plugin = getattr(accelerator.state, "deepspeed_plugin", None)
    if plugin is not None:
        plugin.deepspeed_config["train_micro_batch_size_per_gpu"] = per_device_batch
