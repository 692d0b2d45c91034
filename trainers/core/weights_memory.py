"""What a config's model weights take in GPU memory, read from the safetensors headers alone (torch-free: Validate
shows it). A floor, not a forecast: activations, the LoRA and its optimizer states come on top.

A diffusers folder's parts are its component folders; a single file's are its key prefixes, plus the files that
clip_l, clip_g, t5xxl, ae (the component options) and a family's own (a Wan 2.2 pair's second expert) name. The bytes
a part takes follow how the trainer holds it: the denoiser in the mixed-precision dtype (one byte with fp8_base; a full
finetune trains it in float32 with gradients and optimizer states unless full_bf16/full_fp16), the text encoders until
their outputs are cached, the VAE.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainers.core.fsio import read_safetensors_header
from trainers.core.options import TrainConfig
from trainers.core.options.groups.model import COMPONENT_FILE_OPTIONS

GB = 1e9
_TEXT_PREFIXES = ("text_encoders.", "cond_stage_model.", "conditioner.")
_VAE_PREFIXES = ("first_stage_model.", "vae.")
_KINDS = {"unet": "denoiser", "transformer": "denoiser", "vae": "vae"}
_REFERENCE_PREFIX = "model.diffusion_model."
# Layers a LoRA trains by default: the UNet's transformer blocks, a DiT's blocks, a text encoder's layers.
_LORA_TARGETS = ("attentions.", "transformer_blocks.", "double_blocks.", "single_blocks.", "joint_blocks.", "layers.",
                 "layer.", "block.")
# a family's own files beside a single file (musubi-tuner's names): a Wan 2.2 pair's second expert, Wan 2.1 I2V's CLIP
_OWN_FILES = {"dit_high_noise": "denoiser", "clip": "text_encoder"}
_BLOCK_LISTS = ("transformer_blocks", "single_transformer_blocks", "double_blocks", "single_blocks", "joint_blocks")


@dataclass(frozen=True)
class Part:
    kind: str  # "denoiser", "text_encoder" or "vae"
    params: int
    linear: int = 0  # parameters in Linear (2-D) weights: what int8, int4 and nf4 quantize
    lora_per_rank: int = 0  # LoRA parameters per unit of network_dim on its attention and MLP layers
    swap_units: int = 0  # the transformer blocks blocks_to_swap counts (two FLUX single blocks count as one)

    def __add__(self, other: "Part") -> "Part":
        return Part(self.kind, self.params + other.params, self.linear + other.linear,
                    self.lora_per_rank + other.lora_per_rank, self.swap_units + other.swap_units)


def model_parts(values: dict[str, Any]) -> list[Part]:
    """The parameter count of each part of the config's model; [] when it is not on this machine or unreadable."""
    path = Path(str(values.get("pretrained_model_name_or_path") or "")).expanduser()
    try:
        if path.is_dir():
            return _folder_parts(path)
        if path.is_file() and path.suffix.lower() == ".safetensors":
            parts = _file_parts(path)
            kinds = {**{name: "vae" if name == "ae" else "text_encoder" for name in COMPONENT_FILE_OPTIONS},
                     **_OWN_FILES}
            parts += [_counted(kind, read_safetensors_header(Path(values[name]).expanduser())[0])
                      for name, kind in kinds.items() if str(values.get(name) or "").strip()]
            return parts
    except (OSError, ValueError):
        pass
    return []


def _counted(kind: str, shapes: dict[str, tuple[int, ...]]) -> Part:
    """The counts of one part from its tensors' names and shapes."""
    flat = {key.removeprefix(_REFERENCE_PREFIX): shape for key, shape in shapes.items()}
    matrices = {key: shape for key, shape in flat.items() if key.endswith(".weight") and len(shape) == 2}
    lora = sum(shape[0] + shape[1] for key, shape in matrices.items() if any(t in key for t in _LORA_TARGETS))
    blocks = {kind: {key.split(".")[1] for key in flat if key.startswith(kind + ".")} for kind in _BLOCK_LISTS}
    singles = len(blocks["single_transformer_blocks"]) + len(blocks["single_blocks"])
    doubles = len(blocks["transformer_blocks"]) + len(blocks["double_blocks"]) + len(blocks["joint_blocks"])
    unet = {tuple(key.split(".")[:2]) for key in flat if key.startswith(("down_blocks.", "up_blocks."))}
    units = doubles + singles // 2 + len(unet) + any(key.startswith("mid_block.") for key in flat)
    units = units if kind == "denoiser" else 0
    return Part(kind, sum(math.prod(shape) for shape in flat.values()),
                sum(math.prod(shape) for shape in matrices.values()), lora, units)


def _folder_parts(folder: Path) -> list[Part]:
    parts = []
    for sub in sorted(p for p in folder.iterdir() if p.is_dir()):
        kind = _KINDS.get(sub.name) or ("text_encoder" if sub.name.startswith("text_encoder") else None)
        files = sorted(sub.glob("*.safetensors"))
        plain = [f for f in files if f.name.count(".") == 1]  # not a variant such as *.fp16.safetensors
        if kind and files:
            counted = [_counted(kind, read_safetensors_header(f)[0]) for f in plain or files]
            parts.append(sum(counted[1:], counted[0]))
    return parts


def _file_parts(path: Path) -> list[Part]:
    shapes: dict[str, dict[str, tuple[int, ...]]] = {"denoiser": {}, "text_encoder": {}, "vae": {}}
    for key, shape in read_safetensors_header(path)[0].items():
        kind = ("text_encoder" if key.startswith(_TEXT_PREFIXES) else "vae" if key.startswith(_VAE_PREFIXES)
                else "denoiser")
        shapes[kind][key] = shape
    return [_counted(kind, found) for kind, found in shapes.items() if found]


def weights_note(cfg: TrainConfig) -> str:
    """One line on the GPU memory the weights take in this run; "" when the model cannot be read here."""
    parts = model_parts(cfg.values)
    if not parts:
        return ""
    half = cfg.mixed_precision in ("bf16", "fp16")
    precision = cfg.mixed_precision if half else "float32"
    size = {kind: sum(p.params for p in parts if p.kind == kind) for kind in ("denoiser", "text_encoder", "vae")}
    lines = []
    if cfg.method == "lora":
        fp8 = bool(cfg.values.get("fp8_base"))
        each = 1 if fp8 else 2 if half else 4
        lines.append(f"denoiser {size['denoiser'] * each / GB:.1f} GB ({'fp8_base' if fp8 else precision}"
                     + ("" if fp8 or not half else f"; {size['denoiser'] / GB:.1f} GB with fp8_base") + ")")
    else:
        full_half = bool(cfg.values.get("full_bf16") or cfg.values.get("full_fp16"))
        each = 2 if full_half else 4
        states = 2 if "8bit" in cfg.optimizer_type.lower() else 8
        lines.append(f"denoiser {size['denoiser'] * 2 * each / GB:.1f} GB trained (weights and gradients in "
                     f"{'half precision' if full_half else 'float32'}) + {size['denoiser'] * states / GB:.1f} GB "
                     f"of optimizer states")
    if size["text_encoder"]:
        cached = " until their outputs are cached" if cfg.cache_text_encoder_outputs else ""
        lines.append(f"text encoders {size['text_encoder'] * (2 if half else 4) / GB:.1f} GB{cached}")
    if size["vae"]:
        lines.append(f"VAE {size['vae'] * (2 if half else 4) / GB:.1f} GB")
    extra = "the LoRA with its optimizer states" if cfg.method == "lora" else "the EMA copy, if any"
    return (f"GPU memory for the weights: {', '.join(lines)}. Activations (less with gradient_checkpointing) and "
            f"{extra} come on top.")
