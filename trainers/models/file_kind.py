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
    FamilyRules,
    ModelLoadError,
    all_rules,
    checkpoint_rules,
    folder_rules,
    not_a_unet,
    read_json,
)

PICKLE_SUFFIXES = (".ckpt", ".pt", ".pth", ".bin")
MODEL_SUFFIXES = (".safetensors", *PICKLE_SUFFIXES)
# How kohya names the UNet modules of a LoRA (FamilyRules.unet_key_style) by the blocks they start with
_LORA_STYLES = (("sgm", ("lora_unet_input_blocks_", "lora_unet_middle_block_", "lora_unet_output_blocks_")),
                ("diffusers", ("lora_unet_down_blocks_", "lora_unet_mid_block_", "lora_unet_up_blocks_")))
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
        families = _lora_families(keys, metadata)
        return f"{' or '.join(f.title for f in families)} LoRA" if families else "LoRA (family unknown)"
    try:
        rules = checkpoint_rules(shapes, name)
        return f"{rules.title} checkpoint" if rules else "checkpoint (family unknown)"
    except ModelLoadError:
        pass
    for option, component in COMPONENTS.items():
        if component.found_in(shapes):
            return _component_kind(option, shapes)
    return {"a VAE on its own": "VAE"}.get(not_a_unet(keys), "safetensors (not a model file Atelier knows)")


def _lora_families(keys: CheckpointKeys, metadata: Mapping[str, str]) -> list[FamilyRules]:
    """The families a LoRA may be for: told by its metadata where a family names its own values, else by its module
    names (a family's reference blocks, or kohya's UNet naming narrowed by the cross-attention width)."""
    told = {str(metadata.get(k, "")).strip() for k in ("ss_base_model_version", "modelspec.architecture")} - {""}
    by_metadata = [f for f in all_rules() if told & {getattr(f, "base_model_version", None),
                                                     getattr(f, "modelspec_architecture", None),
                                                     *getattr(f, "variant_versions", ())}]
    if by_metadata:
        return by_metadata
    own = [f for f in all_rules() if any(keys.has("lora_unet_" + p.rstrip(".").rsplit(".", 1)[-1])
                                         for p in getattr(f, "reference_prefixes", ()))]
    if own:
        return own
    style = next((name for name, starts in _LORA_STYLES if any(keys.has(s) for s in starts)), None)
    candidates = [f for f in all_rules() if style and f.unet_key_style == style]
    width = next((s[1] for k, s in keys.shapes.items() if "attn2_to_k" in k and "lora_down" in k and len(s) == 2),
                 None)
    return [f for f in candidates if width and _cross_attention_width(f) == width] or candidates


def _cross_attention_width(family: FamilyRules) -> int | None:
    config = Path(family.arch_dir) / "unet" / "config.json"
    return read_json(config).get("cross_attention_dim") if config.is_file() else None


def _component_kind(option: str, shapes: Mapping[str, tuple[int, ...]]) -> str:
    if option == "ae":  # the original VAE layout: SD's has 4 latent channels, FLUX.1's ae (and SD3's VAE) 16
        channels = (shapes.get("decoder.conv_in.weight") or (0, 0))[1:2]
        return "VAE" if channels == (4,) else "16-channel autoencoder (FLUX.1 ae, SD3 VAE)"
    if option == "t5xxl":
        return "T5 text encoder"
    embedding = next((s for k, s in shapes.items() if k.endswith("token_embedding.weight") and len(s) == 2), None)
    clip = _CLIP_WIDTHS.get(embedding[1]) if embedding else None
    return f"{clip or 'CLIP'} text encoder"
