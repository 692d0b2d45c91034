"""What a model file or folder holds, in a few words, for listing it (the page's folder browser): a checkpoint of a
family, a LoRA (and for which family), a VAE, a text encoder, FLUX.1's autoencoder. Read from safetensors headers and
JSON configs only, with the same rules the checks before loading use (rules.py, checks.py). Torch-free."""
from __future__ import annotations

import functools
import os
from collections.abc import Mapping
from pathlib import Path

from trainers.core.fsio import read_safetensors_header
from trainers.models.checks import COMPONENTS
from trainers.models.rules import (
    CheckpointKeys,
    ModelLoadError,
    checkpoint_rules,
    folder_rules,
    not_a_unet,
    read_json,
    rules_of,
)

PICKLE_SUFFIXES = (".ckpt", ".pt", ".pth", ".bin")
MODEL_SUFFIXES = (".safetensors", *PICKLE_SUFFIXES)
# LoRA metadata (sd-scripts' ss_base_model_version, modelspec.architecture) -> model_family, by how values start
_LORA_METADATA = (("sd_v1", "sd1"), ("sd_v2", "sd2"), ("sdxl", "sdxl"), ("flux", "flux"), ("sd3", "sd3"),
                  ("stable-diffusion-v1", "sd1"), ("stable-diffusion-v2", "sd2"), ("stable-diffusion-xl", "sdxl"),
                  ("stable-diffusion-3", "sd3"), ("flux", "flux"))
# LoRA module names only one family has
_LORA_KEYS = (("lora_te2_", "sdxl"), ("lora_unet_double_blocks", "flux"), ("lora_unet_single_blocks", "flux"),
              ("transformer.single_transformer_blocks", "flux"), ("lora_unet_joint_blocks", "sd3"),
              ("transformer.transformer_blocks", "sd3"))
_CROSS_WIDTHS = {768: "sd1", 1024: "sd2", 2048: "sdxl"}  # a UNet's cross-attention input: its text width
_CLIP_WIDTHS = {768: "CLIP-L", 1280: "CLIP-G", 1024: "OpenCLIP-H"}


def model_kind(path: Path) -> str:
    """What `path` holds ("SDXL checkpoint", "SD1.x LoRA", "VAE", "CLIP-L text encoder", ...); "" when it is no
    model file or folder. Cached by path, size and modification time."""
    try:
        info = os.stat(path)
    except OSError:
        return ""
    return _kind(str(path), info.st_size, info.st_mtime_ns)


@functools.lru_cache(maxsize=4096)
def _kind(path: str, _size: int, _mtime: int) -> str:
    where = Path(path)
    if where.is_dir():
        return _folder_kind(where)
    suffix = where.suffix.lower()
    if suffix in PICKLE_SUFFIXES:
        return "pickle checkpoint (kind not read: convert it to .safetensors)"
    if suffix != ".safetensors":
        return ""
    try:
        shapes, metadata = read_safetensors_header(where)
    except (OSError, ValueError):
        return "unreadable .safetensors"
    return safetensors_kind(shapes, metadata, where.name)


def _folder_kind(folder: Path) -> str:
    try:
        if (folder / "model_index.json").is_file():
            return f"{folder_rules(folder).title} diffusers model"
        config = read_json(folder / "config.json") if (folder / "config.json").is_file() else {}
    except ModelLoadError:
        return "diffusers model (family unknown)"
    kind = str(config.get("_class_name") or (config.get("architectures") or [""])[0])
    return {"AutoencoderKL": "VAE (diffusers folder)", "CLIPTextModel": "text encoder (diffusers folder)",
            "CLIPTextModelWithProjection": "text encoder (diffusers folder)",
            "T5EncoderModel": "T5 text encoder (diffusers folder)"}.get(kind, "")


def safetensors_kind(shapes: Mapping[str, tuple[int, ...]], metadata: Mapping[str, str], name: str) -> str:
    keys = CheckpointKeys(dict(shapes), name)
    if not_a_unet(keys) == "a LoRA":
        family = _lora_family(keys, metadata)
        return f"{rules_of(family).title} LoRA" if family else "LoRA (family unknown)"
    try:
        rules = checkpoint_rules(shapes, name)
        return f"{rules.title} checkpoint" if rules else "checkpoint (family unknown)"
    except ModelLoadError:
        pass
    for option, component in COMPONENTS.items():
        if component.found_in(shapes):
            return _component_kind(option, shapes)
    return {"a VAE on its own": "VAE"}.get(not_a_unet(keys), "safetensors (not a model file Atelier knows)")


def _lora_family(keys: CheckpointKeys, metadata: Mapping[str, str]) -> str | None:
    told = " ".join(str(metadata.get(k, "")) for k in ("ss_base_model_version", "modelspec.architecture")).lower()
    for start, family in _LORA_METADATA:
        if told.startswith(start) or f" {start}" in told:
            return family
    for prefix, family in _LORA_KEYS:
        if keys.has(prefix):
            return family
    width = next((s[1] for k, s in keys.shapes.items() if "attn2_to_k" in k and "lora_down" in k and len(s) == 2),
                 None)
    return _CROSS_WIDTHS.get(width)


def _component_kind(option: str, shapes: Mapping[str, tuple[int, ...]]) -> str:
    if option == "ae":  # the original VAE layout: SD's has 4 latent channels, FLUX.1's ae (and SD3's VAE) 16
        channels = (shapes.get("decoder.conv_in.weight") or (0, 0))[1:2]
        return "VAE" if channels == (4,) else "16-channel autoencoder (FLUX.1 ae, SD3 VAE)"
    if option == "t5xxl":
        return "T5 text encoder"
    embedding = next((s for k, s in shapes.items() if k.endswith("token_embedding.weight") and len(s) == 2), None)
    clip = _CLIP_WIDTHS.get(embedding[1]) if embedding else None
    return f"{clip or 'CLIP'} text encoder"
