"""Wan 2.1 I2V's CLIP image encoder from a file of its own (the `clip` option, musubi-tuner's --clip), as
transformers' CLIPVisionModel that WanImageToVideoPipeline runs: ComfyUI's clip_vision/clip_vision_h.safetensors and a
diffusers folder's image_encoder in transformers' names (`vision_model.encoder.layers.N...`), OpenCLIP's names of the
same ViT-H/14 (`visual.transformer.resblocks.N...`, which ComfyUI reads too) or Wan-AI's
models_clip_open-clip-xlm-roberta-large-vit-huge-14.pth (`visual.transformer.N.attn.to_qkv`; its text tower is
not used). Sizes come from the shapes; what they do not tell (gelu, the 80-wide heads, the layer norms' eps, the image
processor) from the published configs in arch/."""
from __future__ import annotations

import copy
import dataclasses
import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from torch import nn

from trainers.models.base import ModelLoadError
from trainers.models.component_files import fill_meta
from trainers.models.reference_layout import count
from trainers.models.wan.single_file import ARCH, published
from trainers.models.wan.i2v21.clip_files import clip_layout

HEAD_WIDTH = 80  # OpenCLIP ViT-H/14's attention heads (1280 wide, 16 heads); not in the weights
_TOP = "vision_model."
# the names outside the blocks: OpenCLIP's / Wan-AI's -> transformers' (under vision_model.)
_OPEN_CLIP_TOP = {"class_embedding": "embeddings.class_embedding", "conv1.weight": "embeddings.patch_embedding.weight",
                  "positional_embedding": "embeddings.position_embedding.weight", "ln_pre.": "pre_layrnorm.",
                  "ln_post.": "post_layernorm."}
_WAN_TOP = {"cls_embedding": "embeddings.class_embedding", "patch_embedding.weight": "embeddings.patch_embedding.weight",
            "pos_embedding": "embeddings.position_embedding.weight", "pre_norm.": "pre_layrnorm.",
            "post_norm.": "post_layernorm."}
# a block's layers (the fused q, k, v projection split apart): OpenCLIP's / Wan-AI's -> transformers'
_OPEN_CLIP_BLOCK = {"ln_1.": "layer_norm1.", "ln_2.": "layer_norm2.", "attn.out_proj.": "self_attn.out_proj.",
                    "mlp.c_fc.": "mlp.fc1.", "mlp.c_proj.": "mlp.fc2.", "attn.in_proj_": "self_attn.qkv."}
_WAN_BLOCK = {"norm1.": "layer_norm1.", "norm2.": "layer_norm2.", "attn.proj.": "self_attn.out_proj.",
              "mlp.0.": "mlp.fc1.", "mlp.2.": "mlp.fc2.", "attn.to_qkv.": "self_attn.qkv."}


def image_encoder(state: Mapping[str, torch.Tensor], dtype: torch.dtype, source: str) -> nn.Module:
    """CLIPVisionModel of a `clip` file in any of the layouts above (`source`: the file, for messages)."""
    import transformers
    from accelerate import init_empty_weights

    weights = transformers_names(state, source)
    hidden = weights["embeddings.class_embedding"].shape[0]
    patch = weights["embeddings.patch_embedding.weight"].shape
    positions = weights["embeddings.position_embedding.weight"].shape[0]
    config = published("image_encoder")
    config.update(hidden_size=hidden, num_attention_heads=max(1, hidden // HEAD_WIDTH),
                  intermediate_size=weights["encoder.layers.0.mlp.fc1.weight"].shape[0],
                  num_hidden_layers=count(weights, "encoder.layers."), patch_size=patch[-1],
                  image_size=round((positions - 1) ** 0.5) * patch[-1], num_channels=patch[1])
    with init_empty_weights():
        model = transformers.CLIPVisionModel(transformers.CLIPVisionConfig(**config))
    top = _TOP if any(k.startswith(_TOP) for k in model.state_dict()) else ""  # transformers 5 names no vision_model.
    return fill_meta(model, {top + k: v for k, v in weights.items()}, dtype, "CLIP image encoder").requires_grad_(
        False)


def image_processor(encoder: nn.Module) -> Any:
    """WanImageToVideoPipeline's CLIPImageProcessor (the published one's), at the encoder's image size."""
    from transformers import CLIPImageProcessor

    config = json.loads((ARCH / "image_processor" / "preprocessor_config.json").read_text(encoding="utf-8"))
    side = int(encoder.config.image_size)
    config.update(size={"shortest_edge": side}, crop_size={"height": side, "width": side})
    return CLIPImageProcessor(**{k: v for k, v in config.items() if k != "image_processor_type"})


def transformers_names(state: Mapping[str, torch.Tensor], source: str) -> dict[str, torch.Tensor]:
    """The vision tower's tensors in transformers' CLIPVisionModel names, without `vision_model.`."""
    layout = clip_layout(state)
    if layout == "transformers":
        return {k.removeprefix(_TOP): v for k, v in state.items() if not k.startswith("visual_projection.")}
    if layout in ("open_clip", "wan"):
        visual = {k.removeprefix("visual."): v for k, v in state.items() if not k.startswith("textual.")}
        top, block, blocks = ((_OPEN_CLIP_TOP, _OPEN_CLIP_BLOCK, "transformer.resblocks.") if layout == "open_clip"
                              else (_WAN_TOP, _WAN_BLOCK, "transformer."))
        return _renamed(visual, top, block, blocks)
    raise ModelLoadError(f"clip: {Path(source).name} holds no CLIP vision encoder (transformers' vision_model..., "
                         "OpenCLIP's visual.transformer.resblocks... or Wan-AI's visual.transformer...): give ComfyUI's "
                         "clip_vision_h.safetensors")


def _renamed(visual: Mapping[str, torch.Tensor], top: Mapping[str, str], block: Mapping[str, str],
             blocks: str) -> dict[str, torch.Tensor]:
    out: dict[str, torch.Tensor] = {}
    for key, value in visual.items():
        if match := re.fullmatch(re.escape(blocks) + r"(\d+)\.(.+)", key):
            index, rest = match.groups()
            new = next((ours + rest[len(theirs):] for theirs, ours in block.items() if rest.startswith(theirs)), None)
            if new is None:
                continue
            if new.startswith("self_attn.qkv."):  # one (3 x width, ...) projection: q, k, v in that order
                kind = new.removeprefix("self_attn.qkv.")
                for name, part in zip(("q_proj", "k_proj", "v_proj"), value.chunk(3, dim=0)):
                    out[f"encoder.layers.{index}.self_attn.{name}.{kind}"] = part
                continue
            out[f"encoder.layers.{index}.{new}"] = value
            continue
        new = next((ours + key[len(theirs):] for theirs, ours in top.items() if key.startswith(theirs)), None)
        if new is not None:
            out[new] = _flat(new, value)
    return out


def _flat(name: str, value: torch.Tensor) -> torch.Tensor:
    """Wan-AI's class and position embeddings carry batch axes ((1, 1, width), (1, positions, width))."""
    if name == "embeddings.class_embedding":
        return value.reshape(-1)
    if name == "embeddings.position_embedding.weight" and value.ndim == 3:
        return value[0]
    return value


def with_image_encoder(model: Any, path: str, weight_dtype: Any) -> Any:
    """The LoadedModel `model` with Wan 2.1 I2V's CLIP image encoder (frozen) and its image processor from the `clip`
    file, set as its folder's loading sets them."""
    from trainers.models.single_file.checkpoint import open_checkpoint

    family = copy.copy(model.family)
    family.image_encoder = image_encoder(open_checkpoint(path).tensors(), weight_dtype, Path(path).name)
    family.image_processor = image_processor(family.image_encoder)
    return dataclasses.replace(model, family=family)
