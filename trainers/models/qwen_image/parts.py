"""Qwen-Image's text encoder and autoencoder from files of their own, as ComfyUI's split files hold them and
musubi-tuner reads them (`--text_encoder`, `--vae`): Qwen2.5-VL in transformers' older layout (`model.layers...`,
`visual.blocks...`, `lm_head`), the autoencoder in diffusers' layout (Qwen/Qwen-Image's vae folder) or Wan's
original one (ComfyUI's qwen_image_vae). Their sizes come from the tensor shapes; what the shapes do not tell (head
widths, rope, the vision tower's full-attention blocks, the latent statistics) from the published configs."""
from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from trainers.models.base import ModelLoadError
from trainers.models.component_files import fill_meta
from trainers.models.reference_layout import count

if TYPE_CHECKING:
    from trainers.models.flow_rules import Part

VAE_CONFIG = Path(__file__).with_name("vae.json")  # Qwen/Qwen-Image's vae config: its latents_mean/std
# transformers' names of the file's language model and vision tower (musubi-tuner renames them the same way)
FILE_PREFIXES = (("model.", "model.language_model."), ("visual.", "model.visual."))
LANGUAGE, VISION = "model.language_model.", "model.visual."


def load(part: "Part", state: Mapping[str, torch.Tensor], dtype: torch.dtype) -> nn.Module:
    """The part's module from its file's tensors."""
    return autoencoder(state) if part.kind == "vae" else text_encoder(state, part, dtype)


def file_state(part: "Part", module: nn.Module) -> dict[str, torch.Tensor]:
    """The tensors of the part's own file (what `load` reads back): ComfyUI's layout of Qwen2.5-VL, the
    autoencoder in diffusers' layout."""
    state = module.state_dict()
    if part.kind == "vae":
        return dict(state)
    out = {}
    for key, value in state.items():
        ours = next(((theirs, mine) for theirs, mine in FILE_PREFIXES if key.startswith(mine)), None)
        out[key if ours is None else ours[0] + key.removeprefix(ours[1])] = value
    return out


def text_encoder(state: Mapping[str, torch.Tensor], part: "Part", dtype: torch.dtype) -> nn.Module:
    """Qwen2_5_VLForConditionalGeneration from ComfyUI's qwen_2.5_vl file: its widths, depths and vocabulary from the
    shapes, its head widths (128 and the vision tower's 80 in every Qwen2.5-VL size) and the rest as published."""
    from accelerate import init_empty_weights
    from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration

    weights = _transformers_names(state)
    attention, block = f"{LANGUAGE}layers.0.self_attn.", f"{VISION}blocks.0."
    needed = (f"{LANGUAGE}embed_tokens.weight", f"{attention}q_proj.weight", f"{VISION}patch_embed.proj.weight",
              f"{VISION}merger.mlp.0.weight")
    if missing := [k for k in needed if k not in weights]:
        raise ModelLoadError(f"text_encoder: the file has no {missing[0]} (ComfyUI's name without 'language_model.'): "
                             f"it is not a {part.what} as ComfyUI's text_encoders/qwen_2.5_vl_7b file holds it")
    assert part.base_config is not None, "Qwen-Image's text encoder part names its published config"
    published = json.loads(part.base_config.read_text(encoding="utf-8"))
    text, vision = dict(published["text_config"]), dict(published["vision_config"])
    head = text["hidden_size"] // text["num_attention_heads"]
    vision_head = vision["hidden_size"] // vision["num_heads"]
    vocab, width = weights[f"{LANGUAGE}embed_tokens.weight"].shape
    text.update(vocab_size=vocab, hidden_size=width, num_hidden_layers=count(weights, f"{LANGUAGE}layers."),
                intermediate_size=weights[f"{LANGUAGE}layers.0.mlp.gate_proj.weight"].shape[0],
                num_attention_heads=width // head,
                num_key_value_heads=weights[f"{attention}k_proj.weight"].shape[0] // head)
    vision_width, channels, frames, patch, _ = weights[f"{VISION}patch_embed.proj.weight"].shape
    depth = count(weights, f"{VISION}blocks.")
    vision.update(hidden_size=vision_width, num_heads=vision_width // vision_head, depth=depth, in_channels=channels,
                  temporal_patch_size=frames, patch_size=patch,
                  intermediate_size=weights[f"{block}mlp.gate_proj.weight"].shape[0],
                  out_hidden_size=weights[f"{VISION}merger.mlp.2.weight"].shape[0],
                  spatial_merge_size=round((weights[f"{VISION}merger.mlp.0.weight"].shape[1] / vision_width) ** 0.5),
                  fullatt_block_indexes=[i for i in vision["fullatt_block_indexes"] if i < depth])
    # token ids beyond a smaller vocabulary (a tiny model's) left unset
    text.update({k: None for k, v in text.items() if k.endswith("_token_id") and v >= vocab})
    tokens = {k: v for k, v in published.items() if k.endswith("_token_id") and v < vocab}
    weights.setdefault("lm_head.weight", weights[f"{LANGUAGE}embed_tokens.weight"])  # unread: encoding needs no logits
    with init_empty_weights():
        model = Qwen2_5_VLForConditionalGeneration(Qwen2_5_VLConfig(
            text_config=text, vision_config=vision, tie_word_embeddings=published["tie_word_embeddings"], **tokens))
    return fill_meta(model, weights, dtype, part.what)


def autoencoder(state: Mapping[str, torch.Tensor]) -> nn.Module:
    """AutoencoderKLQwenImage (float32) of a vae file: its sizes from the shapes, its latent statistics published."""
    from accelerate import init_empty_weights
    from diffusers import AutoencoderKLQwenImage
    from diffusers.loaders.single_file_utils import convert_wan_vae_to_diffusers

    weights = convert_wan_vae_to_diffusers(dict(state)) if "encoder.conv1.weight" in state else dict(state)
    if "encoder.conv_in.weight" not in weights or "post_quant_conv.weight" not in weights:
        raise ModelLoadError("ae: the file has no encoder.conv_in / post_quant_conv (or Wan's encoder.conv1 / conv2) "
                             "weights: it is not Qwen-Image's autoencoder (qwen_image_vae.safetensors)")
    config = {k: v for k, v in json.loads(VAE_CONFIG.read_text(encoding="utf-8")).items() if not k.startswith("_")}
    base, latents = weights["encoder.conv_in.weight"].shape[0], weights["post_quant_conv.weight"].shape[0]
    if latents != config["z_dim"]:
        raise ModelLoadError(f"ae: the autoencoder has {latents} latent channels; Qwen-Image's has {config['z_dim']} "
                             "(its latent statistics are published for those only)")
    stages = count(weights, "decoder.up_blocks.")
    up = "decoder.up_blocks.{}."
    config.update(base_dim=base, num_res_blocks=count(weights, up.format(0) + "resnets.") - 1,
                  dim_mult=[weights[up.format(i) + "resnets.0.conv2.weight"].shape[0] // base
                            for i in reversed(range(stages))],
                  temperal_downsample=[up.format(i) + "upsamplers.0.time_conv.weight" in weights
                                       for i in reversed(range(stages - 1))])
    with init_empty_weights():
        model = AutoencoderKLQwenImage.from_config(config)
    return fill_meta(model, weights, torch.float32, "autoencoder")


def _transformers_names(state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """ComfyUI's names (`model.layers`, `visual.blocks`) as transformers' current ones; those already so, kept."""
    out = {}
    for key, value in state.items():
        if not key.startswith((LANGUAGE, VISION)):
            key = next((mine + key.removeprefix(theirs) for theirs, mine in FILE_PREFIXES if key.startswith(theirs)),
                       key)
        out[key] = value
    return out
