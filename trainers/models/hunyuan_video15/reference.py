"""HunyuanVideo 1.5's transformer in the reference layout and in diffusers' HunyuanVideo15Transformer3DModel: its
rules (reference_layout.py), after diffusers' conversion script (scripts/convert_hunyuan_video1_5_to_diffusers.py;
diffusers 0.42.1 ships no single-file converter for it). Two files hold it: Tencent's
transformer/<480p|720p>_<t2v|i2v>/diffusion_pytorch_model.safetensors, q, k and v of the blocks apart
(`double_blocks.N.img_attn_q`), and ComfyUI's diffusion_models/hunyuanvideo1.5_720p_<t2v|i2v>_fp16.safetensors, the
three fused (`double_blocks.N.img_attn_qkv`), as musubi-tuner reads both. Its blocks are HunyuanImage 2.1's dual-stream
blocks under the same names, so its rules are HunyuanImage 2.1's (no single blocks) plus the image projection
(`vision_in`) and the condition-type embedding. Text to video and image to video have the same tensors: the files do
not tell them apart (their names do, `task_type` here comes from the run's image_encoder).
"""
from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from trainers.models import reference_layout as layout
from trainers.models.base import ModelLoadError
from trainers.models.hunyuan_image21 import reference as hunyuan_image
from trainers.models.reference_layout import Rule, linear

MARKER = "double_blocks."
PREFIXES = hunyuan_image.PREFIXES
ARCH = Path(__file__).with_name("arch") / "transformer" / "config.json"
_APART = re.compile(r"^(double_blocks\.\d+\.(?:img|txt)_attn)_q\.(weight|bias)$")  # Tencent's q (k and v beside)


def rules(config: Mapping[str, Any]) -> list[Rule]:
    image = {**config, "num_single_layers": 0, "guidance_embeds": False, "use_meanflow": False}
    out = [Rule(r.reference, tuple(p.replace("time_guidance_embed.", "time_embed.") for p in r.parts), r.swap_halves)
           for r in hunyuan_image.rules(image)]
    if config["use_meanflow"]:
        out += linear("time_r_in.mlp.0", "time_embed.timestep_embedder_r.linear_1")
        out += linear("time_r_in.mlp.2", "time_embed.timestep_embedder_r.linear_2")
    for ref, ours in (("0", "norm_in"), ("1", "linear_1"), ("3", "linear_2"), ("4", "norm_out")):
        out += linear(f"vision_in.proj.{ref}", f"image_embedder.{ours}")
    out.append(Rule("cond_type_embedding.weight", ("cond_type_embed.weight",)))
    return out


def fused(state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Tencent's blocks (q, k and v apart) as ComfyUI's (fused `_qkv`); a file already fused is returned as it is."""
    out = dict(state)
    for key in [k for k in state if _APART.match(k)]:
        base, param = _APART.match(key).groups()  # type: ignore[union-attr]
        out[f"{base}_qkv.{param}"] = torch.cat([out.pop(f"{base}_{p}.{param}") for p in "qkv"])
    return out


def apart(state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """ComfyUI's fused blocks as Tencent's (q, k and v apart): the layout of Tencent's own files."""
    out = dict(state)
    for key in [k for k in state if re.match(r"^double_blocks\.\d+\.(img|txt)_attn_qkv\.", k)]:
        for part, tensor in zip("qkv", out.pop(key).chunk(3)):
            out[key.replace("_qkv.", f"_{part}.")] = tensor
    return out


def rope_axes(head: int) -> list[int]:
    """The rope axes (frames, rows, columns) of a head: the published 16 + 56 + 56 of 128 (7/16 of it for each side,
    even), which the tensors do not tell."""
    side = head * 7 // 16 // 2 * 2
    return [head - 2 * side, side, side]


def config_from_shapes(shapes: Mapping[str, tuple[int, ...]], name: str) -> dict[str, Any]:
    """HunyuanVideo15Transformer3DModel's config of a reference-layout file (either): the published one with the
    sizes its tensors tell; a 720p file (by its name) samples at its 960-pixel target size."""
    config = {k: v for k, v in json.loads(ARCH.read_text(encoding="utf-8")).items() if not k.startswith("_")}
    try:
        width, in_channels = shapes["img_in.proj.weight"][:2]
        head = shapes["double_blocks.0.img_attn_q_norm.weight"][0]
        config.update(
            in_channels=in_channels, out_channels=shapes["final_layer.linear.weight"][0], attention_head_dim=head,
            num_attention_heads=width // head, rope_axes_dim=rope_axes(head),
            num_layers=layout.count(shapes, MARKER),
            num_refiner_layers=layout.count(shapes, "txt_in.individual_token_refiner.blocks."),
            mlp_ratio=shapes["double_blocks.0.img_mlp.fc1.weight"][0] / width,
            text_embed_dim=shapes["txt_in.input_embedder.weight"][1],
            text_embed_2_dim=shapes["byt5_in.fc1.weight"][1], image_embed_dim=shapes["vision_in.proj.1.weight"][1],
            use_meanflow="time_r_in.mlp.0.weight" in shapes, target_size=960 if "720p" in name.lower() else 640)
    except KeyError as err:
        raise ModelLoadError(f"{name}: the HunyuanVideo 1.5 transformer has no {err.args[0]}: is the file "
                             "complete?") from None
    return config


LAYOUT = layout.Layout(PREFIXES, MARKER, rules)
strip_prefix = LAYOUT.strip_prefix


def to_diffusers(state: Mapping[str, torch.Tensor], config: Mapping[str, Any], name: str) -> dict[str, torch.Tensor]:
    """Either reference layout -> the diffusers transformer's state dict."""
    return LAYOUT.to_diffusers(fused(state), config, name)


def to_reference(state: Mapping[str, torch.Tensor], config: Mapping[str, Any],
                 tencent: bool = False) -> dict[str, torch.Tensor]:
    """The diffusers transformer's state dict -> ComfyUI's layout (`tencent`: Tencent's, q, k and v apart)."""
    out = LAYOUT.to_reference(state, config)
    return apart(out) if tencent else out
