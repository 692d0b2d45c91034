"""HunyuanImage 2.1's autoencoder from a file of its own (ComfyUI's vae/hunyuan_image_2.1_vae_fp16.safetensors,
sd-scripts' --vae): in Tencent's layout (`encoder.down.N.block.M`, `mid.attn_1.q`, 3D convolutions of one frame as
its checkpoint has them) or in diffusers' (AutoencoderKLHunyuanImage's flat `encoder.down_blocks.N`), after diffusers'
own conversion script (scripts/convert_hunyuan_image_to_diffusers.py). Its sizes come from the shapes; its scaling
factor and channel matching from the published config (arch/vae.json). The text encoders' files are read by
Qwen-Image's reader (ComfyUI's qwen_2.5_vl_7b file, the same Qwen2.5-VL) and component_files' T5 reader (ByT5).
"""
from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from torch import nn

from trainers.models.base import ModelLoadError
from trainers.models.component_files import fill_meta

if TYPE_CHECKING:
    from trainers.models.flow_rules import Part

VAE_CONFIG = Path(__file__).with_name("arch") / "vae.json"
_ATTENTION = (("q.", "to_q."), ("k.", "to_k."), ("v.", "to_v."), ("proj_out.", "proj."), ("norm.", "norm."))
_SAMPLER = {"encoder": ("down", "downsample"), "decoder": ("up", "upsample")}


def load(part: "Part", state: Mapping[str, torch.Tensor], dtype: torch.dtype) -> nn.Module:
    """The autoencoder part's module (flow_checkpoint.load_parts' reader)."""
    return autoencoder(state)


def file_state(part: "Part", module: nn.Module) -> dict[str, torch.Tensor]:
    """The autoencoder's file in Tencent's layout, as ComfyUI ships it (what `load` reads back)."""
    return to_reference(module.state_dict())


def autoencoder(state: Mapping[str, torch.Tensor]) -> nn.Module:
    """AutoencoderKLHunyuanImage (float32) of a vae file in either layout."""
    from accelerate import init_empty_weights
    from diffusers import AutoencoderKLHunyuanImage

    weights = from_reference(state) if any(k.startswith("encoder.down.") for k in state) else dict(state)
    if "encoder.conv_in.weight" not in weights or "decoder.conv_in.weight" not in weights:
        raise ModelLoadError("ae: the file has no encoder.conv_in / decoder.conv_in weights: it is not HunyuanImage "
                             "2.1's autoencoder (hunyuan_image_2.1_vae_fp16.safetensors)")
    config = {k: v for k, v in json.loads(VAE_CONFIG.read_text(encoding="utf-8")).items() if not k.startswith("_")}
    down = sorted({int(k.split(".")[2]) for k in weights if k.startswith("encoder.down_blocks.")})
    samplers = [i for i in down if f"encoder.down_blocks.{i}.conv.weight" in weights]
    resnets = [i for i in down if i not in samplers]
    per_stage = next((n for n, i in enumerate(resnets) if samplers and i > samplers[0]), len(resnets))
    widths = [weights[f"encoder.down_blocks.{i}.conv1.weight"].shape[0] for i in resnets[per_stage - 1::per_stage]]
    config.update(in_channels=weights["encoder.conv_in.weight"].shape[1],
                  out_channels=weights["decoder.conv_out.weight"].shape[0],
                  latent_channels=weights["decoder.conv_in.weight"].shape[1], block_out_channels=widths,
                  layers_per_block=per_stage, spatial_compression_ratio=2 ** len(samplers))
    with init_empty_weights():
        model = AutoencoderKLHunyuanImage.from_config(config)
    return fill_meta(model, weights, torch.float32, "autoencoder")


def from_reference(state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Tencent's names -> diffusers' (the stages' blocks and samplers numbered in one flat list per side)."""
    flat: dict[tuple[str, str], int] = {}
    for side, (stage, sampler) in _SAMPLER.items():
        found = sorted({(int(m[1]), m[2]) for k in state
                        if (m := re.match(rf"{side}\.{stage}\.(\d+)\.(block\.\d+|{sampler})\.", k))},
                       key=lambda item: (item[0], item[1] == sampler, int(item[1].split(".")[-1])
                                         if item[1] != sampler else 0))
        flat.update({(side, f"{stage}.{b}.{what}"): n for n, (b, what) in enumerate(found)})
    out = {}
    for key, value in state.items():
        new = key
        if match := re.match(r"(encoder|decoder)\.((?:down|up)\.\d+\.(?:block\.\d+|downsample|upsample))\.(.+)", key):
            side, where, rest = match.groups()
            blocks = "down_blocks" if side == "encoder" else "up_blocks"
            new = f"{side}.{blocks}.{flat[(side, where)]}.{rest}"
        elif match := re.match(r"(encoder|decoder)\.mid\.(block_1|block_2|attn_1)\.(.+)", key):
            side, block, rest = match.groups()
            if block == "attn_1":
                rest = next((ours + rest[len(theirs):] for theirs, ours in _ATTENTION if rest.startswith(theirs)),
                            rest)
                new = f"{side}.mid_block.attentions.0.{rest}"
            else:
                new = f"{side}.mid_block.resnets.{int(block[-1]) - 1}.{rest}"
        out[new] = value.squeeze(2) if value.ndim == 5 and value.shape[2] == 1 else value
    return out


def to_reference(state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """diffusers' names -> Tencent's, the inverse of from_reference (a stage ends at its sampler, or after as many
    blocks as the first stage has where none follows)."""
    where: dict[tuple[str, int], str] = {}
    for side, (stage, sampler) in _SAMPLER.items():
        blocks = "down_blocks" if side == "encoder" else "up_blocks"
        indices = sorted({int(k.split(".")[2]) for k in state if k.startswith(f"{side}.{blocks}.")})
        samplers = {i for i in indices if f"{side}.{blocks}.{i}.conv.weight" in state}
        per_stage = next((n for n, i in enumerate(indices) if i in samplers), len(indices))
        current, count = 0, 0
        for i in indices:
            if i in samplers:
                where[(side, i)] = f"{stage}.{current}.{sampler}"
                current, count = current + 1, 0
                continue
            if count == per_stage:
                current, count = current + 1, 0
            where[(side, i)] = f"{stage}.{current}.block.{count}"
            count += 1
    out = {}
    for key, value in state.items():
        new = key
        if match := re.match(r"(encoder|decoder)\.(?:down_blocks|up_blocks)\.(\d+)\.(.+)", key):
            side, index, rest = match.groups()
            new = f"{side}.{where[(side, int(index))]}.{rest}"
        elif match := re.match(r"(encoder|decoder)\.mid_block\.(resnets|attentions)\.(\d+)\.(.+)", key):
            side, kind, index, rest = match.groups()
            if kind == "attentions":
                rest = next((theirs + rest[len(ours):] for theirs, ours in _ATTENTION if rest.startswith(ours)), rest)
                new = f"{side}.mid.attn_1.{rest}"
            else:
                new = f"{side}.mid.block_{int(index) + 1}.{rest}"
        out[new] = value
    return out
