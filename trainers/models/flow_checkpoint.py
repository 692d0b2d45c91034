"""Flow families from single files, as sd-scripts and musubi-tuner read them: the denoiser in its reference layout,
and each text encoder and the autoencoder either inside the same file (ComfyUI's and Stability's all-in-one layout,
under the prefixes below) or in a file of its own named by an option (`clip_l`, `clip_g`, `t5xxl`, `ae`; a language
model's, as ComfyUI's split text_encoders files: `text_encoder`). The family says which parts it has (Part) and
converts its denoiser; everything else is here.
"""
from __future__ import annotations

import importlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from trainers.models.base import CheckpointKeys, ModelFiles, ModelLoadError
from trainers.models.flow_rules import Part

if TYPE_CHECKING:
    from trainers.models.single_file.checkpoint import Checkpoint

# The tokenizer sd-scripts pairs with each text encoder (fetched from the hub; CLIP's are built from the vendored
# vocabulary unless tokenizer_cache_dir holds them), and its pad token.
TOKENIZERS: dict[str, tuple[str, str]] = {
    "clip_l": ("openai/clip-vit-large-patch14", "<|endoftext|>"),
    "clip_g": ("laion/CLIP-ViT-bigG-14-laion2B-39B-b160k", "!"),
    "t5": ("google/t5-v1_1-xxl", "<pad>"),
}


def load_parts(ckpt: "Checkpoint", parts: tuple[Part, ...], files: ModelFiles, vae_path: str,
               dtype: torch.dtype, latent_scale: float, latent_shift: float,
               vae_class: str = "AutoencoderKL") -> tuple[list[nn.Module], nn.Module]:
    """(text encoders in `parts` order, autoencoder) from the file or the files its options name (the `vae` option's
    folder loaded as the family's `vae_class`)."""
    from trainers.models import component_files
    from trainers.models.components import vae_folder

    text_encoders: list[nn.Module] = []
    vae: nn.Module | None = None
    for part in parts:
        if part.kind == "vae" and vae_path:
            vae = vae_folder(vae_path, vae_class)
            continue
        state = component_files.component(ckpt, part.prefix, getattr(files, part.option) if part.option else "",
                                          part.what, part.option or "vae")
        if part.reader:
            module = importlib.import_module(part.reader).load(part, state, dtype)
            if part.kind == "vae":
                vae = module
            else:
                text_encoders.append(module)
        elif part.kind == "vae":
            vae = component_files.autoencoder(state, latent_scale, latent_shift)
        elif part.kind == "t5":
            text_encoders.append(component_files.t5_encoder(state, dtype))
        elif part.kind == "llm":
            text_encoders.append(component_files.llm_text_encoder(state, part, dtype))
        else:
            text_encoders.append(component_files.clip_text_encoder(
                state, dtype, with_projection=part.projection,
                hidden_act="quick_gelu" if part.kind == "clip_l" else "gelu"))
    assert vae is not None, "a flow family's parts include its autoencoder"
    return text_encoders, vae


def tokenizer_id(part: Part) -> str:
    """The hub id of a text encoder part's tokenizer (its folder in tokenizer_cache_dir: the id, '/' as '_')."""
    return part.tokenizer or TOKENIZERS[part.kind][0]


def part_tokenizers(parts: tuple[Part, ...], cache_dir: str) -> list[Any]:
    """The tokenizer of each text encoder part, as sd-scripts loads them (tokenizer_cache_dir first)."""
    from transformers import AutoTokenizer, CLIPTokenizer, T5TokenizerFast

    from trainers.models.component_files import cached_tokenizer
    from trainers.models.single_file.tokenizer import clip_tokenizer

    out = []
    for part in parts:
        if part.kind == "vae":
            continue
        if part.kind == "llm" or part.tokenizer:  # a part naming its own tokenizer (Wan's UMT5: google/umt5-xxl)
            out.append(cached_tokenizer(AutoTokenizer, part.tokenizer, cache_dir, part.tokenizer_subfolder))
            continue
        model_id, pad = TOKENIZERS[part.kind]
        cached = bool(cache_dir) and (Path(cache_dir).expanduser() / model_id.replace("/", "_")).is_dir()
        if part.kind == "t5":
            out.append(cached_tokenizer(T5TokenizerFast, model_id, cache_dir))
        elif cached:
            tokenizer = cached_tokenizer(CLIPTokenizer, model_id, cache_dir)
            tokenizer.pad_token = pad  # as sd-scripts sets CLIP-G's
            out.append(tokenizer)
        else:
            out.append(clip_tokenizer(pad))  # the same vocabulary, vendored
    return out


def load_flow_checkpoint(family: Any, ckpt: "Checkpoint", weight_dtype: torch.dtype, vae_path: str,
                         files: ModelFiles) -> Any:
    """A LoadedModel of a flow family's single file (family: its FlowFamily, which converts the denoiser)."""
    from diffusers import FlowMatchEulerDiscreteScheduler

    from trainers.models.base import LoadedModel

    keys = CheckpointKeys(ckpt.shapes, str(ckpt.path))
    if issues := family.checkpoint_issues(keys, files, vae_path):
        raise ModelLoadError("; ".join(f"{i.field}: {i.message}" for i in issues))
    denoiser = family.denoiser_from_checkpoint(ckpt, weight_dtype)
    text_encoders, vae = load_parts(ckpt, family.checkpoint_parts, files, vae_path, weight_dtype,
                                    *family.latent_scaling, vae_class=family.vae_class)
    tokenizers = part_tokenizers(family.checkpoint_parts, files.tokenizer_cache_dir)
    variant = family.checkpoint_variant(denoiser.config)
    scheduler = FlowMatchEulerDiscreteScheduler(**variant.scheduler_config())
    return LoadedModel(variant, denoiser, vae, text_encoders, tokenizers, scheduler, "flow", str(ckpt.path))
