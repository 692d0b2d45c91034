"""How much GPU memory and host RAM a config's run takes at its peak, before it starts (torch-free: Validate and
`--print-config` show it).

    estimate = estimate_memory(cfg)            # None: neither the model's files nor its family's sizes are known
    estimate.gpu_gb, estimate.host_gb, estimate.gpu   # totals, and the GPU's share by item
    line, warnings = memory_report(cfg, card_gb=12)   # the line to show, and advice when it does not fit

The model's parameters come from its safetensors headers (trainers/core/weights_memory.py), or from the family's
published sizes (each family's rules.py: memory_facts). Weights follow their dtype and quantization
(base_model_precision, text_encoder_precision), layer offload moves a share of the denoiser's blocks to host RAM, and
the trained parameters carry their gradients and optimizer states. Activations are counted from the family's sequence
(image tokens from the resolution, the autoencoder's factor and the patch size, text tokens, width, blocks:
memory_facts' Tokens) where it states one, else from its two figures scaled by resolution; both by batch and gradient
checkpointing. A video family's sequence is its latent frames (1 + (frames - 1) / frame_rule) x each frame's tokens,
for the longest window of the run's video dataset TOML, else the family's window (docs/memory.md, "Video"). Weights
and optimizer states are counted exactly. Three readings of a card (docs/memory.md; tests/core/test_memory_published.py
holds them to peers' published figures):
`gpu_gb` is what torch.cuda.max_memory_allocated reports, `reserved_gb` what torch.cuda.max_memory_reserved reports
(the caching allocator holds freed blocks and rounds allocations up: ALLOCATOR_RESERVE of the peak), and `card_gb` what
nvidia-smi shows, the CUDA context (CUDA_CONTEXT_GB) on top: what a card must have free.
"""
from __future__ import annotations

import functools
import shutil
import subprocess
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainers.core.memory_facts import ModelSize, Tokens, with_controls
from trainers.core.options import TrainConfig
from trainers.core.registry import FAMILY_NAMES, method_spec
from trainers.core.weights_memory import GB, Part, model_parts

# The CUDA context of torch 2.x with lazy module loading (~0.3 GB), cuBLAS' and cuDNN's workspaces beside it
CUDA_CONTEXT_GB = 0.5
ALLOCATOR_RESERVE = 0.06  # what the caching allocator holds beyond the peak allocated, as a share of it
# What a transformer block keeps for its backward, in hidden-wide 16-bit tensors per token: 34 bytes per token and unit
# of width (Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer Models", without the
# attention scores SDPA does not keep)
BLOCK_ACTIVATIONS = 17
FIT_MARGIN = 0.9  # a run fits a card when its need is at most this share of the card
# The caption pass's activations per token of a text encoder of P parameters, in 16-bit bytes: 4.5 sqrt(P). The
# encoder keeps every layer's hidden states (the families ask for them: (layers + 1) x width) beside one layer's
# working set (its MLP's 3 x intermediate and attention's 4 x width); across T5-XXL, Gemma 2 2B, Qwen2.5-VL 7B, Qwen3
# 8B and Mistral 3 24B that is 4.1-4.9 sqrt(P) (docs/memory.md, "The caption pass").
CAPTION_BYTES_PER_TOKEN = 4.5
CAPTION_TOKENS = 256  # a caption's tokens where the family states no text sequence (memory_facts' Tokens)
CAPTION_BATCH_MAX = 64  # captions a GPU encodes at once at most when text_encoder_batch_size is unset
CAPTION_FREE_SHARE = 0.8  # of the device's free memory the caption pass's activations may take
QUANT_BYTES = {"fp8": 1.0, "int8": 1.0, "int4": 0.53, "nf4": 0.56}  # per weight, with their scales
QUANT_MODES = ("none", *QUANT_BYTES)
# Optimizer state bytes per trained parameter (sd-scripts' optimizer_type names, matched case-insensitively).
_STATE_BYTES = (("adafactor", 0.1), ("came", 4.0), ("lion8bit", 1.0), ("8bit", 2.0), ("lion", 4.0),
                ("sgdnesterov", 4.0), ("sgd", 0.0), ("prodigy", 16.0), ("dadapt", 12.0))  # plain SGD: no momentum
_ADAM_STATE_BYTES = 8.0  # AdamW's two float32 moments


@dataclass(frozen=True)
class Setting:
    """What the advice varies: the base model's quantization and the share of denoiser blocks offloaded."""

    base: str = "none"
    offload: float = 0.0

    def describe(self) -> str:
        parts = [f"{self.base} base"] if self.base != "none" else []
        parts += [f"{self.offload:.0%} offload"] if self.offload else []
        return " + ".join(parts) or "as configured"


@dataclass
class MemoryEstimate:
    gpu: dict[str, float] = field(default_factory=dict)  # item -> GB on the GPU at the peak
    host: dict[str, float] = field(default_factory=dict)  # item -> GB of host RAM held beside the process
    source: str = ""  # where the model's sizes come from
    setting: Setting = Setting()
    # GB on the GPU while the captions are encoded once before the first step (cached text-encoder outputs), by item:
    # the text encoders alone beside the VAE (the denoiser goes to the card after the pass), and the activations of
    # the captions encoded at once. Empty when the text encoders stay for the steps (counted in `gpu`).
    caption_pass: dict[str, float] = field(default_factory=dict)
    caption_batch: int = 1  # the captions encoded at once the figure counts (text_encoder_batch_size, else 1)
    frames: int = 0  # a video family's window the activations count (counted_window); 0: an image family

    @property
    def caching(self) -> float:
        """GB allocated on the GPU during the caption pass (0: not done)."""
        return sum(self.caption_pass.values())

    @property
    def gpu_gb(self) -> float:
        return sum(self.gpu.values())

    @property
    def host_gb(self) -> float:
        return sum(self.host.values())

    @property
    def reserved_gb(self) -> float:
        """What torch.cuda.max_memory_reserved would report: the peak allocated and the allocator's reserve."""
        return self.gpu_gb * (1 + ALLOCATOR_RESERVE)

    @property
    def card_gb(self) -> float:
        """What a card must have free for the run's steps (what nvidia-smi would show): reserved and the context."""
        return self.reserved_gb + CUDA_CONTEXT_GB

    @property
    def caching_card_gb(self) -> float:
        """What a card must have free while the captions are encoded before the first step (0: not done)."""
        return self.caching * (1 + ALLOCATOR_RESERVE) + CUDA_CONTEXT_GB if self.caching else 0.0

    @property
    def peak_pass(self) -> str:
        """Which pass needs more of the card: "steps" or "captions" (the pass encoding the captions before them)."""
        return "captions" if self.caching_card_gb > self.card_gb else "steps"

    def weights_and_states_gb(self) -> float:
        """The exactly counted part (all but activations), wherever it lives: what a CPU run's RSS measures."""
        return sum(gb for item, gb in {**self.gpu, **self.host}.items() if item != "activations")

    def text(self) -> str:
        items = ", ".join(f"{item} {_gb(gb)}" for item, gb in self.gpu.items() if gb >= 0.0005)
        host = (f"; host RAM beside the process ~{_gb(self.host_gb)} GB ("
                + ", ".join(f"{item} {_gb(gb)}" for item, gb in self.host.items()) + ")") if self.host else ""
        passed = ", ".join(f"{item} {_gb(gb)}" for item, gb in self.caption_pass.items() if gb >= 0.0005)
        peak = ("; the peak is this pass, not the steps" if self.peak_pass == "captions" else
                "; the steps are the peak")
        caching = (f" Encoding the captions before the first step takes ~{_gb(self.caching_card_gb)} GB of the card "
                   f"({passed}, {self.caption_batch} caption(s) at a time, the denoiser and the VAE not on the card then){peak}."
                   if self.caching else "")
        return (f"Estimated peak GPU memory ~{_gb(self.gpu_gb)} GB ({items}; from {self.source}), "
                f"~{_gb(self.card_gb)} GB of the card with the allocator's reserve and the CUDA context{host}."
                f"{caching}")

    def to_dict(self) -> dict[str, object]:
        return {"gpu_gb": round(self.gpu_gb, 3), "host_gb": round(self.host_gb, 3),
                "gpu": {k: round(v, 3) for k, v in self.gpu.items()},
                "host": {k: round(v, 3) for k, v in self.host.items()}, "source": self.source,
                "caption_pass_gb": round(self.caching, 3)}


def _gb(value: float) -> str:
    return f"{value:.1f}" if value >= 1 else f"{value:.2f}" if value >= 0.01 else f"{value:.3f}"


def base_precision(values: dict) -> str:
    """The base model's quantization: base_model_precision, or fp8 from sd-scripts' fp8_base."""
    chosen = str(values.get("base_model_precision") or "none")
    return "fp8" if chosen == "none" and values.get("fp8_base") else chosen


def offload_share(values: dict, units: int) -> float:
    """The share of denoiser blocks kept in host RAM: layer_offload_fraction, or blocks_to_swap of `units`."""
    fraction = values.get("layer_offload_fraction")
    if fraction:
        return float(fraction)
    count = values.get("blocks_to_swap")
    return min(1.0, int(count) / units) if count and units else 0.0


def parked_share(cfg: TrainConfig) -> float:
    """The share of the denoiser's weights its family keeps in host RAM while another part runs (its rules'
    `parked_share`: Wan 2.2's offload_inactive_dit, one expert of two); 0 for a family without."""
    from trainers.models.rules import rules_of

    share = getattr(rules_of(cfg.model_family), "parked_share", None) if cfg.model_family in FAMILY_NAMES else None
    return float(share(cfg.values)) if share is not None else 0.0


def model_size(cfg: TrainConfig) -> ModelSize | None:
    """The config's model's sizes: counted from its files when they are here, else its family's published ones; as
    the family's options size them (its rules' `trained_size`: LTX-2's with_audio LoRA targets)."""
    size = _files_or_published(cfg)
    if size is None or cfg.model_family not in FAMILY_NAMES:
        return size
    from trainers.models.rules import rules_of

    return rules_of(cfg.model_family).trained_size(cfg.values, size)


def _files_or_published(cfg: TrainConfig) -> ModelSize | None:
    published = published_size(cfg.model_family, str(cfg.values.get("pretrained_model_name_or_path") or ""))
    parts = model_parts(cfg.values)
    if not parts:
        return published
    total = {kind: sum((p for p in parts if p.kind == kind), Part(kind, 0)) for kind in ("denoiser", "text_encoder",
                                                                                        "vae")}
    denoiser = total["denoiser"]
    # Activations scale with the model: take the published family nearest in size (the option, else by size).
    known = [size for size in map(published_size, FAMILY_NAMES) if size is not None]
    like = published or min(known, key=lambda s: abs(s.denoiser - denoiser.params))
    scale = denoiser.params / like.denoiser
    # a single-file UNet's blocks are not named as blocks_to_swap counts them: the family's count
    units = denoiser.swap_units or like.swap_units
    return ModelSize(denoiser.params, denoiser.linear, total["text_encoder"].params, total["text_encoder"].linear,
                     total["vae"].params, denoiser.lora_per_rank, total["text_encoder"].lora_per_rank,
                     units, "the model's files", like.native_pixels, like.activations_gb * scale,
                     like.activations_checkpointed_gb * scale, tokens=_video_tokens(published))


def _video_tokens(published: ModelSize | None) -> Tokens | None:
    """A video family's sequence, kept for its model's own files (its frames and resolution set its activations)."""
    return published.tokens if published is not None and published.tokens and published.tokens.frame_rule else None


def published_size(family: str, model: str = "") -> ModelSize | None:
    """The published sizes of `family`'s models (its rules' memory_facts, or the variant `model`, a hub id, names);
    None for 'auto' or a family without."""
    from trainers.models.rules import rules_of

    if family not in FAMILY_NAMES:
        return None
    rules, words = rules_of(family), model.lower()
    return next((size for keys, size in rules.memory_variants.items() if all(key in words for key in keys)),
                rules.memory_facts)


def with_references(cfg: TrainConfig, size: ModelSize) -> ModelSize:
    """A model whose control images are optional (FLUX.2) counts, in an edit run, the tokens of the most references a
    target of its dataset has (the families that always take one count it in their memory_facts)."""
    from trainers.models.edit_rules import reference_count
    from trainers.models.rules import rules_of

    if cfg.model_family not in FAMILY_NAMES or not getattr(rules_of(cfg.model_family), "controls_optional", False):
        return size
    references = reference_count(cfg.values, rules_of(cfg.model_family).max_controls)
    if not references:
        return size
    return with_controls(size, references, f"{size.source}, with {references} reference image(s) per target")


def estimate_memory(cfg: TrainConfig, setting: Setting | None = None, on_gpu: bool = True) -> MemoryEstimate | None:
    """The peak memory of `cfg`'s run (with `setting` instead of its quantization and offload, for advice); None when
    the model's sizes are unknown. `on_gpu` False: a CPU run, whose everything is host RAM."""
    size = model_size(cfg)
    if size is None:
        return None
    size = with_references(cfg, size)
    values = cfg.values
    setting = setting or Setting(base_precision(values), offload_share(values, size.swap_units))
    half = cfg.mixed_precision in ("bf16", "fp16")
    dtype_bytes = 2 if half else 4
    full = method_spec(cfg.method).trains == "full"
    out = MemoryEstimate(source=size.source, setting=setting)
    gpu, host = out.gpu, out.host
    # an offloaded block is on the GPU only while it runs, and the next one arrives meanwhile
    in_flight = 2 / size.swap_units if setting.offload and size.swap_units else 0.0
    on_device = min(1.0, 1.0 - setting.offload + in_flight)
    if full:
        # an offloaded block's gradients go to host RAM as they come, and the optimizer steps it (and keeps its
        # states) there
        trained = 2 if values.get("full_bf16") or values.get("full_fp16") else 4
        states = size.denoiser * state_bytes(cfg.optimizer_type)
        gpu["denoiser weights"] = size.denoiser * trained * on_device / GB
        gpu["gradients"] = size.denoiser * trained * on_device / GB
        gpu["optimizer states"] = states * (1.0 - setting.offload) / GB
        if setting.offload:
            host["offloaded blocks, gradients and optimizer states"] = (
                (size.denoiser * trained * 2 + states) * setting.offload / GB)
        trainable_text = size.text_encoders if _trains_text_encoders(cfg) else 0
    else:
        weights = _quantized(size.denoiser, size.denoiser_linear, setting.base, dtype_bytes)
        parked = parked_share(cfg)
        gpu["denoiser weights"] = weights * on_device * (1.0 - parked) / GB
        if setting.offload:
            host["offloaded blocks (pinned)"] = weights * setting.offload / GB
        if parked:
            host["the denoiser's part not running (pinned)"] = weights * parked / GB
        rank = int(values.get("network_dim") or 4)
        lora = size.lora_per_rank * rank * (0 if cfg.values.get("network_train_text_encoder_only") else 1)
        lora += size.text_lora_per_rank * rank * (1 if _trains_text_encoders(cfg) else 0)
        gpu["LoRA, gradients and optimizer states"] = lora * (4 + 4 + state_bytes(cfg.optimizer_type)) / GB
        if setting.base == "fp8":
            gpu["fp8 layers cast for the backward"] = _fp8_cast(cfg, size, dtype_bytes)
        trainable_text = 0
    text_quant = str(values.get("text_encoder_precision") or "none")
    resident = not cfg.cache_text_encoder_outputs or _trains_text_encoders(cfg)
    text_weights = _quantized(size.text_encoders, size.text_encoders_linear, text_quant, dtype_bytes) / GB
    if size.text_encoders and resident:
        gpu["text encoders"] = (text_weights if not trainable_text
                                else trainable_text * (4 + 4 + state_bytes(cfg.optimizer_type)) / GB)
    gpu["VAE"] = size.vae * (4 if values.get("no_half_vae") or not half else 2) / GB
    if size.text_encoders and not resident and on_gpu:  # the text encoders alone on the card (trainers/train/session.py)
        out.caption_batch = int(values.get("text_encoder_batch_size") or 1)
        out.caption_pass = {"text encoders": text_weights,  # the VAE in host RAM meanwhile (train/session.py)
                            "activations": out.caption_batch * caption_activations_gb(
                                size.text_encoders, caption_tokens(cfg.model_family, size), dtype_bytes)}
    gpu["activations"] = _activations(cfg, size)
    window = counted_window(cfg, size)
    if window and size.tokens:
        out.frames = window[0]
        out.source += (f"; {window[0]}-frame windows: {latent_frames(size.tokens, window[0])} latent frames of "
                       f"{window[1] / size.tokens.pixels_per_token:.0f} tokens")
    if not on_gpu:
        host.update(gpu)
        gpu.clear()
    return out


def _quantized(params: int, linear: int, mode: str, dtype_bytes: int) -> float:
    """Bytes of weights with `mode`: fp8, int8, int4 and nf4 quantize the Linear weights (fp8 with diffusers' layerwise
    casting; norms and embeddings keep the compute dtype)."""
    if mode == "none":
        return params * dtype_bytes
    return linear * QUANT_BYTES[mode] + (params - linear) * dtype_bytes


def _fp8_cast(cfg: TrainConfig, size: ModelSize, dtype_bytes: int) -> float:
    """GB of fp8 weights cast to the compute dtype that autograd keeps for the backward (a Linear's input gradient needs
    its weight): with gradient checkpointing those of the one block being recomputed, without it every layer's."""
    linear = size.denoiser_linear / size.swap_units if cfg.gradient_checkpointing and size.swap_units else \
        size.denoiser_linear
    return linear * dtype_bytes / GB


def _pixels(cfg: TrainConfig, size: ModelSize) -> int:
    width, _, height = str(cfg.values.get("resolution") or "512").partition(",")
    try:
        return int(width) * int(height or width)
    except ValueError:  # Validate names the resolution itself
        return size.native_pixels


def counted_window(cfg: TrainConfig, size: ModelSize) -> tuple[int, int] | None:
    """(frames, pixels) of the window a video family's estimate counts: of the run's dataset TOML the one with the
    most tokens (video_windows), else the family's window at the run's resolution; None for an image family."""
    tokens = size.tokens
    if tokens is None or not tokens.frame_rule:
        return None
    windows = video_windows(cfg.values, tokens) or [(tokens.frames, _pixels(cfg, size))]
    return max(windows, key=lambda window: sequence_tokens(tokens, window[1], window[0]))


def _activations(cfg: TrainConfig, size: ModelSize) -> float:
    """GB of activations kept for the backward: from the family's sequence (size.tokens) where it has one (a video
    family's at its counted_window), else its two figures at native_pixels scaled by the pixel count."""
    pixels = _pixels(cfg, size)
    dtype = 1 if cfg.mixed_precision in ("bf16", "fp16") else 2
    batch = int(cfg.values.get("train_batch_size") or 1)
    checkpointed = bool(cfg.gradient_checkpointing)
    window = counted_window(cfg, size)
    if size.tokens and window:
        return _sequence_activations(size.tokens, window[1], checkpointed, window[0]) * batch * dtype
    if size.tokens:
        return _sequence_activations(size.tokens, pixels, checkpointed) * batch * dtype
    per_sample = size.activations_checkpointed_gb if checkpointed else size.activations_gb
    return per_sample * pixels / size.native_pixels * batch * dtype


def latent_frames(tokens: Tokens, frames: int) -> int:
    """A video transformer's latent frames for a window of `frames` (1 + (frames - 1) / frame_rule; 1 for an image
    model)."""
    return 1 + (max(1, frames) - 1) // tokens.frame_rule if tokens.frame_rule else 1


def sequence_tokens(tokens: Tokens, pixels: int, frames: int = 1) -> float:
    """The tokens one sample puts through the transformer: its images' (each frame's latent tokens x latent frames)
    and the text's."""
    return (tokens.images * pixels / tokens.pixels_per_token * latent_frames(tokens, frames) + tokens.text_tokens
            + tokens.frame_tokens * max(1, frames))


def _sequence_activations(tokens: Tokens, pixels: int, checkpointed: bool, frames: int = 1) -> float:
    """GB one 16-bit sample keeps: every block's activations, or with gradient checkpointing every block's input and
    the activations of the one block recomputed in the backward (SDPA's attention keeps no scores: linear in
    tokens)."""
    width = sequence_tokens(tokens, pixels, frames) * tokens.hidden * 2 / GB  # one hidden-wide 16-bit tensor
    if checkpointed:
        return (tokens.blocks + BLOCK_ACTIVATIONS) * width
    return tokens.blocks * BLOCK_ACTIVATIONS * width


def video_windows(values: Mapping[str, Any], tokens: Tokens) -> list[tuple[int, int]]:
    """(frames, pixels) of the longest window of each dataset in the run's musubi-tuner video dataset TOML
    (dataset_config): its largest target_frames (max_frames with frame_extraction "full"), rounded down to
    1 + frame_rule x k, at its resolution; an image dataset's items are 1-frame clips. Empty when the run names no
    readable video dataset TOML (the estimate then counts the family's window, tokens.frames)."""
    from trainers.data.video_toml import DEFAULTS, FIELD, is_video_dataset_config

    path = Path(str(values.get(FIELD) or "")).expanduser()
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8")) if str(values.get(FIELD) or "").strip() else {}
    except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError):
        return []
    if not is_video_dataset_config(raw):
        return []
    general: dict[str, Any] = raw["general"] if isinstance(raw.get("general"), dict) else {}
    windows = []
    for table in (t for t in raw["datasets"] if isinstance(t, dict)):
        values_of = {**DEFAULTS, **general, **table}
        try:
            resolution = values_of["resolution"]
            width, height = (resolution, resolution) if isinstance(resolution, int) else resolution[:2]
            if "image_directory" in table or "image_jsonl_file" in table:
                frames = 1
            elif values_of["frame_extraction"] == "full":
                frames = int(values_of["max_frames"])
            else:
                frames = max(int(f) for f in values_of["target_frames"])
            windows.append((1 + (frames - 1) // tokens.frame_rule * tokens.frame_rule, int(width) * int(height)))
        except (TypeError, ValueError):  # Validate names the dataset's own problem
            continue
    return windows


def caption_tokens(family: str, size: ModelSize | None = None) -> int:
    """A caption's tokens as its family's text encoders see it: the text sequence its memory_facts state (Tokens),
    else CAPTION_TOKENS."""
    size = size or published_size(family)
    return size.tokens.text_tokens if size is not None and size.tokens else CAPTION_TOKENS


def caption_activations_gb(text_params: int, tokens: int, dtype_bytes: int = 2) -> float:
    """GB of activations encoding one caption of `tokens` takes in text encoders of `text_params` parameters (no
    gradients: what one layer works on and the hidden states kept): CAPTION_BYTES_PER_TOKEN sqrt(P) bytes a token in
    16 bits."""
    return CAPTION_BYTES_PER_TOKEN * text_params ** 0.5 * tokens * dtype_bytes / 2 / GB


def caption_batch_size(free_gb: float, per_caption_gb: float) -> int:
    """Captions to encode at once when text_encoder_batch_size is unset: as many as CAPTION_FREE_SHARE of the
    device's free memory holds (the text encoders already on it), at least 1, at most CAPTION_BATCH_MAX."""
    if per_caption_gb <= 0:
        return CAPTION_BATCH_MAX
    return max(1, min(CAPTION_BATCH_MAX, int(free_gb * CAPTION_FREE_SHARE / per_caption_gb)))


def _trains_text_encoders(cfg: TrainConfig) -> bool:
    if method_spec(cfg.method).trains == "network":
        return not cfg.values.get("network_train_unet_only")
    return bool(cfg.values.get("train_text_encoder"))


def state_bytes(optimizer_type: str) -> float:
    name = optimizer_type.lower()
    return next((b for key, b in _STATE_BYTES if key in name), _ADAM_STATE_BYTES)


def fitting_settings(cfg: TrainConfig, card_gb: float, limit: int = 3) -> list[tuple[Setting, MemoryEstimate]]:
    """The lightest-touch settings (least quantization, then least offload) whose estimate fits `card_gb`."""
    current = estimate_memory(cfg)
    if current is None:
        return []
    can_offload = model_size(cfg).swap_units > 0  # type: ignore[union-attr]
    offloads = (0.0, 0.25, 0.5, 0.75) if can_offload else (0.0,)
    found = []
    bases = ("none",) if method_spec(cfg.method).trains == "full" else ("none", "int8", "nf4")  # quantized: LoRAs
    for base in bases:  # fp8 takes what int8 takes
        for offload in offloads:
            setting = Setting(base, offload)
            if setting == current.setting:
                continue
            estimate = estimate_memory(cfg, setting)
            if estimate is not None and fits(estimate, card_gb):
                found.append((setting, estimate))
                break  # more offload on this base only costs speed
    return found[:limit]


def fits(estimate: MemoryEstimate, card_gb: float) -> bool:
    """Whether the steps fit: within FIT_MARGIN of the card (a long run's fragmentation needs the room)."""
    return estimate.card_gb <= card_gb * FIT_MARGIN


def caption_pass_fits(estimate: MemoryEstimate, card_gb: float) -> bool:
    """Whether the pass encoding the captions once before the steps fits the card (a short pass of one allocation
    pattern: the whole card)."""
    return estimate.caching_card_gb <= card_gb


def memory_report(cfg: TrainConfig, card_gb: float | None = None) -> tuple[str, list[str]]:
    """(the estimate's line, warnings): a warning when it does not fit `card_gb` (default: the smallest GPU the
    launch uses), naming settings that would."""
    estimate = estimate_memory(cfg)
    if estimate is None:
        return "", []
    card_gb = card_memory_gb(str(cfg.values.get("gpu_ids") or "")) if card_gb is None else card_gb
    line = estimate.text()
    caching = ([f"encoding the captions before the first step needs ~{estimate.caching_card_gb:.1f} GB of GPU "
                f"memory, more than this {card_gb:.0f} GB card: set text_encoder_precision to 'int8' or 'nf4'"]
               if card_gb and not caption_pass_fits(estimate, card_gb) else [])
    if card_gb is None or fits(estimate, card_gb):
        return line + (f" Fits a {card_gb:.0f} GB card." if card_gb and not caching else ""), caching
    options = [f"{s.describe()}: ~{e.card_gb:.1f} GB" for s, e in fitting_settings(cfg, card_gb)]
    advice = ("would fit: " + "; ".join(options) + " (base_model_precision, layer_offload_fraction)" if options
              else "lower resolution or train_batch_size, turn on gradient_checkpointing or cache_text_encoder_outputs")
    if estimate.frames > 1:  # a video run's activations grow with its windows' frames
        advice += (f"; or shorter windows: the {estimate.frames}-frame windows' activations take "
                   f"~{estimate.gpu.get('activations', 0.0):.1f} GB (target_frames in the dataset TOML)")
    return line, [f"the run needs ~{estimate.card_gb:.1f} GB of GPU memory, more than {FIT_MARGIN:.0%} of this "
                  f"{card_gb:.0f} GB card; {advice}", *caching]


def card_memory_gb(gpu_ids: str = "") -> float | None:
    """The memory in GB of the smallest GPU a launch uses (`gpu_ids`, else every one listed), asked of nvidia-smi
    (torch-free); None without NVIDIA GPUs."""
    chosen = {part.strip() for part in gpu_ids.split(",") if part.strip()}
    sizes = [gb for index, gb in _cards() if not chosen or index in chosen]
    return min(sizes) if sizes else None


@functools.lru_cache(maxsize=1)
def _cards() -> tuple[tuple[str, float], ...]:
    """(index, memory in GB) of each GPU nvidia-smi lists; none without it."""
    if shutil.which("nvidia-smi") is None:
        return ()
    try:
        listed = subprocess.run(["nvidia-smi", "--query-gpu=index,memory.total", "--format=csv,noheader,nounits"],
                                capture_output=True, text=True, timeout=30).stdout
        rows = [line.split(",") for line in listed.splitlines() if line.strip()]
        return tuple((index.strip(), float(mib) * 2**20 / GB) for index, mib in rows)
    except (OSError, subprocess.SubprocessError, ValueError):
        return ()
