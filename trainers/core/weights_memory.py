"""What a config's model weights take in GPU memory, read from the safetensors headers alone (torch-free: Validate
shows it). A floor, not a forecast: activations, the LoRA and its optimizer states come on top.

A diffusers folder's parts are its component folders; a single file's are its key prefixes, plus the files that
clip_l, clip_g, t5xxl and ae name. The bytes a part takes follow how the trainer holds it: the denoiser in the
mixed-precision dtype (one byte with fp8_base; a full finetune trains it in float32 with gradients and optimizer
states unless full_bf16/full_fp16), the text encoders until their outputs are cached, the VAE.
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


@dataclass(frozen=True)
class Part:
    kind: str  # "denoiser", "text_encoder" or "vae"
    params: int


def model_parts(values: dict[str, Any]) -> list[Part]:
    """The parameter count of each part of the config's model; [] when it is not on this machine or unreadable."""
    path = Path(str(values.get("pretrained_model_name_or_path") or "")).expanduser()
    try:
        if path.is_dir():
            return _folder_parts(path)
        if path.is_file() and path.suffix.lower() == ".safetensors":
            parts = _file_parts(path)
            parts += [Part("vae" if name == "ae" else "text_encoder", _params(Path(values[name]).expanduser()))
                      for name in COMPONENT_FILE_OPTIONS if str(values.get(name) or "").strip()]
            return parts
    except (OSError, ValueError):
        pass
    return []


def _params(path: Path) -> int:
    return sum(math.prod(shape) for shape in read_safetensors_header(path)[0].values())


def _folder_parts(folder: Path) -> list[Part]:
    parts = []
    for sub in sorted(p for p in folder.iterdir() if p.is_dir()):
        kind = _KINDS.get(sub.name) or ("text_encoder" if sub.name.startswith("text_encoder") else None)
        files = sorted(sub.glob("*.safetensors"))
        plain = [f for f in files if f.name.count(".") == 1]  # not a variant such as *.fp16.safetensors
        if kind and files:
            parts.append(Part(kind, sum(_params(f) for f in plain or files)))
    return parts


def _file_parts(path: Path) -> list[Part]:
    counts = {"denoiser": 0, "text_encoder": 0, "vae": 0}
    for key, shape in read_safetensors_header(path)[0].items():
        kind = ("text_encoder" if key.startswith(_TEXT_PREFIXES) else "vae" if key.startswith(_VAE_PREFIXES)
                else "denoiser")
        counts[kind] += math.prod(shape)
    return [Part(kind, n) for kind, n in counts.items() if n]


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
