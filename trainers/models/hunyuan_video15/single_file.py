"""HunyuanVideo 1.5's autoencoder and I2V image encoder from files of their own, as musubi-tuner reads them (`--vae`,
`--image_encoder`):

- the autoencoder: Tencent's vae/diffusion_pytorch_model.safetensors or ComfyUI's
  vae/hunyuanvideo15_vae_fp16.safetensors, in Tencent's layout (`encoder.down.N.block.M`, `encoder.down.N.downsample`,
  `mid.block_1`, `mid.attn_1.q`), or a file already in diffusers' (AutoencoderKLHunyuanVideo15's
  `down_blocks.N.resnets.M`), after diffusers' conversion script (convert_hunyuan_video_15_vae_checkpoint_to_diffusers).
  Its sizes come from the shapes (the time downsamplers from their convolutions' width: 8 sub-pixels to a channel, 4
  for space alone), its scaling factor from the published config (arch/vae/config.json).
- SigLIP (I2V): ComfyUI's clip_vision/sigclip_vision_patch14_384.safetensors, in transformers' SiglipVisionModel
  layout (`vision_model.encoder.layers.N`); its sizes from the shapes, its head width and the rest, and its image
  processor, as published (arch/image_encoder.json, arch/feature_extractor.json).

The text encoders' files are read by the flow layer (component_files: Qwen2.5-VL's language model as an `llm`, ByT5
as a `t5`).
"""
from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from trainers.models.base import ModelLoadError
from trainers.models.component_files import fill_meta
from trainers.models.hunyuan_video15.rules import SIGLIP_KEYS
from trainers.models.reference_layout import count

if TYPE_CHECKING:
    from trainers.models.flow_rules import Part

ARCH = Path(__file__).with_name("arch")
# Tencent's name of each autoencoder module -> diffusers' ({s}: encoder or decoder, {i} and {j}: numbers)
_VAE_NAMES = (("{s}.down.{i}.block.{j}.", "{s}.down_blocks.{i}.resnets.{j}."),
              ("{s}.down.{i}.downsample.", "{s}.down_blocks.{i}.downsamplers.0."),
              ("{s}.up.{i}.block.{j}.", "{s}.up_blocks.{i}.resnets.{j}."),
              ("{s}.up.{i}.upsample.", "{s}.up_blocks.{i}.upsamplers.0."),
              ("{s}.mid.block_1.", "{s}.mid_block.resnets.0."), ("{s}.mid.block_2.", "{s}.mid_block.resnets.1."),
              *((f"{{s}}.mid.attn_1.{theirs}.", f"{{s}}.mid_block.attentions.0.{ours}.")
                for theirs, ours in (("q", "to_q"), ("k", "to_k"), ("v", "to_v"), ("norm", "norm"),
                                     ("proj_out", "proj_out"))))
SIGLIP = "vision_model."


def _pattern(template: str) -> re.Pattern[str]:
    fields = {"s": r"(?P<s>encoder|decoder)", "i": r"(?P<i>\d+)", "j": r"(?P<j>\d+)"}
    return re.compile("^" + re.escape(template).replace(r"\{", "{").replace(r"\}", "}").format(**fields))


def _renamed(state: Mapping[str, torch.Tensor], to_diffusers: bool) -> dict[str, torch.Tensor]:
    pairs = [(_pattern(a), b) if to_diffusers else (_pattern(b), a) for a, b in _VAE_NAMES]
    out = {}
    for key, value in state.items():
        for pattern, template in pairs:
            if match := pattern.match(key):
                key = template.format(**match.groupdict()) + key[match.end():]
                break
        out[key] = value
    return out


def from_reference(state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Tencent's autoencoder names -> diffusers'."""
    return _renamed(state, to_diffusers=True)


def to_reference(state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """diffusers' autoencoder names -> Tencent's (what ComfyUI's file holds)."""
    return _renamed(state, to_diffusers=False)


def load(part: "Part", state: Mapping[str, torch.Tensor], dtype: torch.dtype) -> nn.Module:
    """The autoencoder part's module (flow_checkpoint.load_parts' reader)."""
    return autoencoder(state)


def file_state(part: "Part", module: nn.Module) -> dict[str, torch.Tensor]:
    """The autoencoder's file in Tencent's layout, as ComfyUI ships it (what `load` reads back)."""
    return to_reference(module.state_dict())


def _published(name: str) -> dict[str, Any]:
    return {k: v for k, v in json.loads((ARCH / name).read_text(encoding="utf-8")).items() if not k.startswith("_")}


def autoencoder(state: Mapping[str, torch.Tensor]) -> nn.Module:
    """AutoencoderKLHunyuanVideo15 (float32) of a vae file in either layout."""
    from accelerate import init_empty_weights
    from diffusers import AutoencoderKLHunyuanVideo15

    weights = from_reference(state) if any(k.startswith("encoder.down.") for k in state) else dict(state)
    if "encoder.conv_in.conv.weight" not in weights or "decoder.conv_in.conv.weight" not in weights:
        raise ModelLoadError("ae: the file has no encoder.conv_in.conv / decoder.conv_in.conv weights: it is not "
                             "HunyuanVideo 1.5's autoencoder (hunyuanvideo15_vae_fp16.safetensors)")
    config = _published("vae/config.json")
    try:
        levels = count(weights, "encoder.down_blocks.")
        widths = [weights[f"encoder.down_blocks.{i}.resnets.0.conv1.conv.weight"].shape[0] for i in range(levels)]
        samplers = [i for i in range(levels) if f"encoder.down_blocks.{i}.downsamplers.0.conv.conv.weight" in weights]
        in_time = [i for i in samplers if widths[i + 1] // weights[
            f"encoder.down_blocks.{i}.downsamplers.0.conv.conv.weight"].shape[0] == 8]
        config.update(in_channels=weights["encoder.conv_in.conv.weight"].shape[1],
                      out_channels=weights["decoder.conv_out.conv.weight"].shape[0],
                      latent_channels=weights["decoder.conv_in.conv.weight"].shape[1], block_out_channels=widths,
                      layers_per_block=count(weights, "encoder.down_blocks.0.resnets."),
                      spatial_compression_ratio=2 ** len(samplers), temporal_compression_ratio=2 ** len(in_time))
    except (KeyError, IndexError) as err:
        raise ModelLoadError(f"ae: the file is not a complete HunyuanVideo 1.5 autoencoder ({type(err).__name__}: "
                             f"{err})") from None
    with init_empty_weights():
        model = AutoencoderKLHunyuanVideo15.from_config(config)
    return fill_meta(model, weights, torch.float32, "autoencoder")


def image_encoder(path: str, dtype: torch.dtype) -> tuple[nn.Module, Any]:
    """(SiglipVisionModel frozen in eval mode, its SiglipImageProcessor) of a SigLIP file: its widths, depth, patch and
    image size from the shapes, the rest as published."""
    from accelerate import init_empty_weights
    from transformers import SiglipImageProcessor, SiglipVisionConfig, SiglipVisionModel

    from trainers.models.single_file.checkpoint import open_checkpoint

    weights = dict(open_checkpoint(path).tensors())
    if missing := [k for k in SIGLIP_KEYS if k not in weights]:
        raise ModelLoadError(f"image_encoder: {Path(path).name} has no {missing[0]}: it is not SigLIP's vision model "
                             "(ComfyUI's clip_vision/sigclip_vision_patch14_384.safetensors)")
    config = _published("image_encoder.json")
    head = config["hidden_size"] // config["num_attention_heads"]
    width, channels, patch, _ = weights[SIGLIP_KEYS[0]].shape
    positions = weights[SIGLIP_KEYS[1]].shape[0]
    config.update(hidden_size=width, num_attention_heads=max(1, width // head), num_channels=channels,
                  patch_size=patch, image_size=round(positions ** 0.5) * patch,
                  intermediate_size=weights[SIGLIP_KEYS[2]].shape[0],
                  num_hidden_layers=count(weights, f"{SIGLIP}encoder.layers."),
                  vision_use_head=f"{SIGLIP}head.probe" in weights)
    with init_empty_weights():
        model = SiglipVisionModel(SiglipVisionConfig(**config))
    if not any(k.startswith(SIGLIP) for k in model.state_dict()):  # transformers 5 names it without vision_model.
        weights = {k.removeprefix(SIGLIP): v for k, v in weights.items()}
    model = fill_meta(model, weights, dtype, "SigLIP image encoder").requires_grad_(False)
    side = config["image_size"]
    processor = SiglipImageProcessor(**{**_published("feature_extractor.json"),
                                        "size": {"height": side, "width": side}})
    return model, processor
