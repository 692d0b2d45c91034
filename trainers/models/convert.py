"""Diffusers state dicts to the original single-file (LDM / SGM) layouts that A1111, Forge and ComfyUI load.

The UNet is under `model.diffusion_model.*` and the VAE under `first_stage_model.*` in every such file;
text encoders are HF CLIP (`clip_to_ldm`) or OpenCLIP (`openclip_to_ldm`) under a prefix the family
names (trainers/models/<family>/family.py).

Each mapping is written structurally (module by module) and refuses keys it does not know, so a
new architecture fails loudly instead of losing weights. The way back (single file -> diffusers)
uses diffusers' own converters (see single_file/load.py); the round-trip tests hold the two together.
"""
from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

import torch

from trainers.models.rules import UNET_PREFIX, VAE_PREFIX  # noqa: F401 - re-exported for the families

Tensors = dict[str, torch.Tensor]


class ConversionError(ValueError):
    """A weight has no place in the target layout (an architecture this converter does not know)."""


_RESNET = {"norm1": "in_layers.0", "conv1": "in_layers.2", "time_emb_proj": "emb_layers.1",
           "norm2": "out_layers.0", "conv2": "out_layers.3", "conv_shortcut": "skip_connection"}
_UNET_TOP = {"time_embedding.linear_1": "time_embed.0", "time_embedding.linear_2": "time_embed.2",
             "conv_in": "input_blocks.0.0", "conv_norm_out": "out.0", "conv_out": "out.2",
             "add_embedding.linear_1": "label_emb.0.0", "add_embedding.linear_2": "label_emb.0.2"}


def _resnet(rest: str) -> str:
    module, _, tail = rest.partition(".")
    if module not in _RESNET:
        raise ConversionError(f"unknown resnet weight {rest!r}")
    return f"{_RESNET[module]}.{tail}"


def unet_to_ldm_key(key: str, config: Mapping[str, Any]) -> str:
    """One diffusers UNet2DConditionModel key -> its name under `model.diffusion_model.`."""
    per_block = config["layers_per_block"]
    if not isinstance(per_block, int):
        raise ConversionError(f"layers_per_block = {per_block!r}: only one number for all blocks is supported")
    stride = per_block + 1  # LDM input_blocks per down block: resnets (+ attention) then a downsampler
    for diffusers, ldm in _UNET_TOP.items():
        if key.startswith(diffusers + "."):
            return ldm + key[len(diffusers):]
    if m := re.fullmatch(r"down_blocks\.(\d+)\.(resnets|attentions)\.(\d+)\.(.+)", key):
        block, kind, j, rest = int(m[1]), m[2], int(m[3]), m[4]
        index = 1 + block * stride + j
        return f"input_blocks.{index}.0.{_resnet(rest)}" if kind == "resnets" else f"input_blocks.{index}.1.{rest}"
    if m := re.fullmatch(r"down_blocks\.(\d+)\.downsamplers\.0\.conv\.(.+)", key):
        return f"input_blocks.{(int(m[1]) + 1) * stride}.0.op.{m[2]}"
    if m := re.fullmatch(r"mid_block\.resnets\.(\d+)\.(.+)", key):
        return f"middle_block.{2 * int(m[1])}.{_resnet(m[2])}"
    if m := re.fullmatch(r"mid_block\.attentions\.0\.(.+)", key):
        return f"middle_block.1.{m[1]}"
    if m := re.fullmatch(r"up_blocks\.(\d+)\.(resnets|attentions)\.(\d+)\.(.+)", key):
        block, kind, j, rest = int(m[1]), m[2], int(m[3]), m[4]
        index = block * stride + j
        return f"output_blocks.{index}.0.{_resnet(rest)}" if kind == "resnets" else f"output_blocks.{index}.1.{rest}"
    if m := re.fullmatch(r"up_blocks\.(\d+)\.upsamplers\.0\.conv\.(.+)", key):
        block = int(m[1])
        has_attention = "CrossAttn" in config["up_block_types"][block]
        return f"output_blocks.{block * stride + per_block}.{2 if has_attention else 1}.conv.{m[2]}"
    raise ConversionError(f"UNet weight {key!r} has no place in the original layout")


def unet_to_ldm(state_dict: Mapping[str, torch.Tensor], config: Mapping[str, Any]) -> Tensors:
    return {UNET_PREFIX + unet_to_ldm_key(k, config): v for k, v in state_dict.items()}


_VAE_ATTN = {"group_norm": "norm", "to_q": "q", "to_k": "k", "to_v": "v", "to_out.0": "proj_out"}
_VAE_RESNET = {"norm1": "norm1", "conv1": "conv1", "norm2": "norm2", "conv2": "conv2", "conv_shortcut": "nin_shortcut"}


def _vae_resnet(rest: str) -> str:
    module, _, tail = rest.partition(".")
    if module not in _VAE_RESNET:
        raise ConversionError(f"unknown VAE resnet weight {rest!r}")
    return f"{_VAE_RESNET[module]}.{tail}"


def vae_to_ldm_key(key: str, config: Mapping[str, Any]) -> str:
    n_up = len(config["up_block_types"])
    if key.split(".")[0] in ("quant_conv", "post_quant_conv"):
        return key
    part, _, rest = key.partition(".")
    if part not in ("encoder", "decoder"):
        raise ConversionError(f"VAE weight {key!r} has no place in the original layout")
    if rest.startswith(("conv_in.", "conv_out.")):
        return key
    if rest.startswith("conv_norm_out."):
        return f"{part}.norm_out.{rest[len('conv_norm_out.'):]}"
    if m := re.fullmatch(r"mid_block\.resnets\.(\d+)\.(.+)", rest):
        return f"{part}.mid.block_{int(m[1]) + 1}.{_vae_resnet(m[2])}"
    if m := re.fullmatch(r"mid_block\.attentions\.0\.(.+)\.(weight|bias)", rest):
        if m[1] not in _VAE_ATTN:
            raise ConversionError(f"unknown VAE attention weight {key!r}")
        return f"{part}.mid.attn_1.{_VAE_ATTN[m[1]]}.{m[2]}"
    if m := re.fullmatch(r"down_blocks\.(\d+)\.resnets\.(\d+)\.(.+)", rest):
        return f"{part}.down.{m[1]}.block.{m[2]}.{_vae_resnet(m[3])}"
    if m := re.fullmatch(r"down_blocks\.(\d+)\.downsamplers\.0\.conv\.(.+)", rest):
        return f"{part}.down.{m[1]}.downsample.conv.{m[2]}"
    # The LDM decoder numbers its up blocks from the lowest resolution: diffusers' up_blocks.0 is up.{n-1}.
    if m := re.fullmatch(r"up_blocks\.(\d+)\.resnets\.(\d+)\.(.+)", rest):
        return f"{part}.up.{n_up - 1 - int(m[1])}.block.{m[2]}.{_vae_resnet(m[3])}"
    if m := re.fullmatch(r"up_blocks\.(\d+)\.upsamplers\.0\.conv\.(.+)", rest):
        return f"{part}.up.{n_up - 1 - int(m[1])}.upsample.conv.{m[2]}"
    raise ConversionError(f"VAE weight {key!r} has no place in the original layout")


def vae_to_ldm(state_dict: Mapping[str, torch.Tensor], config: Mapping[str, Any]) -> Tensors:
    out: Tensors = {}
    for key, value in state_dict.items():
        ldm = vae_to_ldm_key(key, config)
        if ".mid.attn_1." in ldm and ldm.endswith(".weight") and value.ndim == 2:
            value = value[:, :, None, None]  # LDM's attention projections are 1x1 convolutions
        out[VAE_PREFIX + ldm] = value
    return out


def _clip_keys(state_dict: Mapping[str, torch.Tensor]) -> Tensors:
    """A CLIPTextModel state dict without the `text_model.` level (transformers 5 drops it; 4 has it)."""
    return {k.removeprefix("text_model."): v for k, v in state_dict.items()}


def clip_to_ldm(state_dict: Mapping[str, torch.Tensor], prefix: str, max_positions: int = 77) -> Tensors:
    """HF CLIP (SD1.x, SDXL's first encoder): the same names under `<prefix>` (which ends in `text_model.`)."""
    out = {prefix + k: v for k, v in _clip_keys(state_dict).items() if not k.startswith("text_projection")}
    # Original checkpoints carry this buffer; some loaders read it.
    out.setdefault(prefix + "embeddings.position_ids", torch.arange(max_positions, dtype=torch.int64)[None])
    return out


_OPENCLIP_LAYER = {"layer_norm1": "ln_1", "layer_norm2": "ln_2", "mlp.fc1": "mlp.c_fc", "mlp.fc2": "mlp.c_proj",
                   "self_attn.out_proj": "attn.out_proj"}


def openclip_to_ldm(state_dict: Mapping[str, torch.Tensor], prefix: str, pad_layers_to: int | None = None) -> Tensors:
    """HF CLIP -> OpenCLIP names under `<prefix>`: fused q/k/v `in_proj`, `text_projection` as a matrix.

    SD2.x's diffusers text encoder has 23 layers (it uses OpenCLIP's penultimate layer); the
    original has 24. `pad_layers_to` adds copies of the last layer (never used, as kohya does) and
    an identity `text_projection`, so the file has every weight an original SD2.x file has.
    """
    sd = _clip_keys(state_dict)
    out: Tensors = {}
    layers: dict[int, dict[str, torch.Tensor]] = {}
    for key, value in sd.items():
        if m := re.fullmatch(r"encoder\.layers\.(\d+)\.(.+)\.(weight|bias)", key):
            layers.setdefault(int(m[1]), {})[f"{m[2]}.{m[3]}"] = value
        elif key == "embeddings.token_embedding.weight":
            out[prefix + "token_embedding.weight"] = value
        elif key == "embeddings.position_embedding.weight":
            out[prefix + "positional_embedding"] = value
        elif key.startswith("final_layer_norm."):
            out[prefix + "ln_final." + key.split(".", 1)[1]] = value
        elif key == "text_projection.weight":
            out[prefix + "text_projection"] = value.T.contiguous()
        else:
            raise ConversionError(f"text encoder weight {key!r} has no place in the OpenCLIP layout")
    for i, weights in sorted(layers.items()):
        block = f"{prefix}transformer.resblocks.{i}."
        for kind in ("weight", "bias"):
            out[block + f"attn.in_proj_{kind}"] = torch.cat(
                [weights.pop(f"self_attn.{p}_proj.{kind}") for p in "qkv"], dim=0)
        for name, value in weights.items():
            module, _, kind = name.rpartition(".")
            if module not in _OPENCLIP_LAYER:
                raise ConversionError(f"text encoder weight {name!r} of layer {i} has no OpenCLIP name")
            out[block + f"{_OPENCLIP_LAYER[module]}.{kind}"] = value
    if pad_layers_to is not None and layers:
        last = max(layers)
        source = f"{prefix}transformer.resblocks.{last}."
        for i in range(last + 1, pad_layers_to):
            for key in [k for k in out if k.startswith(source)]:
                out[key.replace(source, f"{prefix}transformer.resblocks.{i}.")] = out[key].clone()
        if prefix + "text_projection" not in out:
            width = out[prefix + "ln_final.weight"].shape[0]
            out[prefix + "text_projection"] = torch.eye(width, dtype=out[prefix + "ln_final.weight"].dtype)
    if prefix + "logit_scale" not in out and prefix + "ln_final.weight" in out:
        out[prefix + "logit_scale"] = torch.tensor(math.log(100.0), dtype=out[prefix + "ln_final.weight"].dtype)
    return out
