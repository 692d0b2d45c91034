"""The Wan models from ComfyUI's split files: the diffusion model in Wan-AI's reference layout
(diffusion_models/wan2.1_t2v_*.safetensors, wan2.1_i2v_*, wan2.2_*: `blocks.0.self_attn.q.weight`, `patch_embedding`,
`head.head`), read through diffusers' own convert_wan_transformer_to_diffusers; the UMT5-XXL text encoder in
transformers' layout (text_encoders/umt5_xxl_fp16.safetensors, the `text_encoder` option); the autoencoder (the `ae`
option): Wan 2.1's in Wan-AI's layout (vae/wan_2.1_vae.safetensors, diffusers' convert_wan_vae_to_diffusers) or in
diffusers', Wan 2.2's 48-channel one in diffusers' (convert_wan_vae_to_diffusers takes Wan 2.1's structure only). Sizes
come from the tensor shapes; what they do not tell (the 128-wide attention heads, eps, the rope length, the latent
statistics) from the published configs in arch/. ComfyUI's scaled fp8 files are refused by name. What a family reads
beside these (a second expert, an image encoder): each family's with_own_files.
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
from trainers.models.reference_layout import count, prefix_of
from trainers.models.wan.split_files import scaled_fp8, vae_layout

if TYPE_CHECKING:
    from trainers.models.flow_rules import Part
    from trainers.models.single_file.checkpoint import Checkpoint

ARCH = Path(__file__).with_name("arch")
PREFIXES = ("model.diffusion_model.", "diffusion_model.", "")  # ComfyUI's and Wan-AI's nesting of the denoiser
MARKER = "patch_embedding."
HEAD_WIDTH = 128  # every published Wan transformer's attention heads (1.3B: 12, 5B: 24, 14B: 40); not in the weights
IMAGE_KEY = "blocks.0.cross_attn.k_img.weight"  # Wan 2.1 I2V's image key projection (its width: added_kv_proj_dim)


def published(component: str) -> dict[str, Any]:
    config = json.loads((ARCH / component / "config.json").read_text(encoding="utf-8"))
    return {k: v for k, v in config.items() if not k.startswith("_")}


# --- the transformer ---

def config_from_shapes(shapes: Mapping[str, tuple[int, ...]], name: str) -> dict[str, Any]:
    """WanTransformer3DModel's config of a reference-layout file (its prefix removed): the published 1.3B's with the
    sizes its tensors tell."""
    def shape(key: str) -> tuple[int, ...]:
        if key not in shapes:
            raise ModelLoadError(f"{name}: the Wan transformer has no {key}: is the file complete?")
        return tuple(shapes[key])

    patch = shape("patch_embedding.weight")  # (width, in channels, *patch)
    width, patch_size = patch[0], list(patch[2:])
    area = patch_size[0] * patch_size[1] * patch_size[2]
    config = published("transformer")
    config.update(in_channels=patch[1], out_channels=shape("head.head.weight")[0] // area, patch_size=patch_size,
                  num_attention_heads=max(1, width // HEAD_WIDTH), attention_head_dim=HEAD_WIDTH,
                  text_dim=shape("text_embedding.0.weight")[1], freq_dim=shape("time_embedding.0.weight")[1],
                  ffn_dim=shape("blocks.0.ffn.0.weight")[0], num_layers=count(shapes, "blocks."),
                  cross_attn_norm="blocks.0.norm3.weight" in shapes,
                  qk_norm="rms_norm_across_heads" if "blocks.0.self_attn.norm_q.weight" in shapes else None,
                  image_dim=shapes["img_emb.proj.0.weight"][0] if "img_emb.proj.0.weight" in shapes else None,
                  added_kv_proj_dim=shapes[IMAGE_KEY][0] if IMAGE_KEY in shapes else None)
    if width % HEAD_WIDTH:
        raise ModelLoadError(f"{name}: the Wan transformer is {width} wide, not a multiple of its {HEAD_WIDTH}-wide "
                             "attention heads: is it a Wan model?")
    return config


def transformer(ckpt: "Checkpoint", dtype: torch.dtype, title: str) -> nn.Module:
    """The WanTransformer3DModel of a diffusion_models file (Wan-AI's names, ComfyUI's `model.diffusion_model.`)."""
    from accelerate import init_empty_weights
    from diffusers import WanTransformer3DModel
    from diffusers.loaders.single_file_utils import convert_wan_transformer_to_diffusers

    prefix = prefix_of(ckpt.shapes, PREFIXES, MARKER)
    shapes = {k[len(prefix):]: v for k, v in ckpt.shapes.items() if k.startswith(prefix)}
    if scaled_fp8(shapes):
        raise ModelLoadError(f"pretrained_model_name_or_path: {ckpt.path.name} stores the {title} transformer as "
                             "scaled fp8 (ComfyUI's *_fp8_scaled files), which is not read here: use its fp16/bf16 "
                             "file (e.g. wan2.1_t2v_1.3B_fp16.safetensors) and set fp8_base to train in fp8")
    config = config_from_shapes(shapes, ckpt.path.name)
    state = {k[len(prefix):]: v for k, v in ckpt.tensors(prefix).items()}
    weights = convert_wan_transformer_to_diffusers(state)
    with init_empty_weights():
        model = WanTransformer3DModel.from_config(config)
    return fill_meta(model, weights, dtype, f"{title} transformer")


# diffusers' names -> Wan-AI's, the inverse of convert_wan_transformer_to_diffusers' renames (in this order)
_TO_REFERENCE = (("condition_embedder.time_embedder.linear_1", "time_embedding.0"),
                 ("condition_embedder.time_embedder.linear_2", "time_embedding.2"),
                 ("condition_embedder.text_embedder.linear_1", "text_embedding.0"),
                 ("condition_embedder.text_embedder.linear_2", "text_embedding.2"),
                 ("condition_embedder.time_proj", "time_projection.1"),
                 ("condition_embedder.image_embedder.norm1", "img_emb.proj.0"),
                 ("condition_embedder.image_embedder.ff.net.0.proj", "img_emb.proj.1"),
                 ("condition_embedder.image_embedder.ff.net.2", "img_emb.proj.3"),
                 ("condition_embedder.image_embedder.norm2", "img_emb.proj.4"),
                 ("attn2", "cross_attn"), ("attn1", "self_attn"), (".to_out.0.", ".o."), (".to_q.", ".q."),
                 (".to_k.", ".k."), (".to_v.", ".v."), (".add_k_proj.", ".k_img."), (".add_v_proj.", ".v_img."),
                 (".norm_added_k.", ".norm_k_img."), ("proj_out", "head.head"), ("ffn.net.0.proj", "ffn.0"),
                 ("ffn.net.2", "ffn.2"), ("norm2", "norm__placeholder"), ("norm3", "norm2"),
                 ("norm__placeholder", "norm3"))


def to_reference(state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A diffusers WanTransformer3DModel's weights in Wan-AI's layout (ComfyUI's diffusion_models files)."""
    out = {}
    for key, value in state.items():
        new = key
        for ours, theirs in _TO_REFERENCE:
            new = new.replace(ours, theirs)
        new = "head.modulation" if new == "scale_shift_table" else new.replace(".scale_shift_table", ".modulation")
        out[new] = value
    return out


# --- the parts beside it: UMT5 (text_encoder) and the autoencoder (ae) ---

def load(part: "Part", state: Mapping[str, torch.Tensor], dtype: torch.dtype) -> nn.Module:
    """The part's module from its file's tensors (flow_checkpoint.load_parts' reader)."""
    return autoencoder(state) if part.kind == "vae" else umt5(state, dtype)


def file_state(part: "Part", module: nn.Module) -> dict[str, torch.Tensor]:
    """The tensors of the part's own file as ComfyUI ships it (what `load` reads back)."""
    state = module.state_dict()
    if part.kind == "vae":  # Wan 2.1's in Wan-AI's layout; Wan 2.2's in diffusers' (the file read for it)
        return dict(state) if module.config.is_residual else vae_to_reference(state)
    return {k: v for k, v in state.items() if k != "encoder.embed_tokens.weight"}  # tied to shared.weight


def umt5(state: Mapping[str, torch.Tensor], dtype: torch.dtype) -> nn.Module:
    """UMT5EncoderModel from a file in transformers' layout (ComfyUI's umt5_xxl_fp16/bf16): its sizes from the
    shapes (UMT5 has a relative attention bias in every block, T5 in the first only)."""
    import transformers
    from accelerate import init_empty_weights

    if scaled_fp8(state):
        raise ModelLoadError("text_encoder: the file stores UMT5-XXL as scaled fp8 (ComfyUI's "
                             "umt5_xxl_fp8_e4m3fn_scaled.safetensors), which is not read here: use "
                             "umt5_xxl_fp16.safetensors (text_encoder_precision = 'fp8' keeps it in 8 bits)")
    weights = umt5_from_reference(state) if "token_embedding.weight" in state else dict(state)
    embed = weights.get("shared.weight", weights.get("encoder.embed_tokens.weight"))
    bias = "encoder.block.{}.layer.0.SelfAttention.relative_attention_bias.weight"
    if embed is None or bias.format(0) not in weights:
        raise ModelLoadError("text_encoder: the file has no shared.weight or encoder.block.0...relative_attention_bias:"
                             " it is not UMT5-XXL in transformers' layout (ComfyUI's umt5_xxl_fp16.safetensors) nor "
                             "in Wan-AI's (models_t5_umt5-xxl-enc-bf16.pth)")
    layers = count(weights, "encoder.block.")
    if layers > 1 and bias.format(1) not in weights:
        raise ModelLoadError("text_encoder: the file is a T5 encoder (a relative attention bias in its first block "
                             "only), not the UMT5-XXL that Wan reads (umt5_xxl_fp16.safetensors)")
    weights.setdefault("shared.weight", embed)
    weights.setdefault("encoder.embed_tokens.weight", embed)
    buckets, heads = weights[bias.format(0)].shape
    config = transformers.UMT5Config(
        vocab_size=embed.shape[0], d_model=embed.shape[1], num_heads=heads, num_layers=layers,
        d_kv=weights["encoder.block.0.layer.0.SelfAttention.q.weight"].shape[0] // heads,
        d_ff=weights["encoder.block.0.layer.1.DenseReluDense.wi_0.weight"].shape[0],
        relative_attention_num_buckets=buckets, feed_forward_proj="gated-gelu", is_encoder_decoder=False,
        use_cache=False, pad_token_id=0, eos_token_id=1, decoder_start_token_id=0)
    with init_empty_weights():
        model = transformers.UMT5EncoderModel(config)
    return fill_meta(model, weights, dtype, "UMT5 text encoder")


# Wan-AI's UMT5 encoder (wan/modules/t5.py: T5Encoder without a shared position bias) -> transformers' names
_UMT5_BLOCK = (("pos_embedding.embedding.", "layer.0.SelfAttention.relative_attention_bias."),
               ("norm1.", "layer.0.layer_norm."), ("attn.", "layer.0.SelfAttention."),
               ("norm2.", "layer.1.layer_norm."), ("ffn.gate.0.", "layer.1.DenseReluDense.wi_0."),
               ("ffn.fc1.", "layer.1.DenseReluDense.wi_1."), ("ffn.fc2.", "layer.1.DenseReluDense.wo."))
_UMT5_TOP = (("token_embedding.", "shared."), ("norm.", "encoder.final_layer_norm."))


def umt5_from_reference(state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Wan-AI's models_t5_umt5-xxl-enc-bf16.pth (musubi-tuner's --t5) in transformers' UMT5 names."""
    out = {}
    for key, value in state.items():
        new = next((ours + key[len(theirs):] for theirs, ours in _UMT5_TOP if key.startswith(theirs)), key)
        if match := re.fullmatch(r"blocks\.(\d+)\.(.+)", key):
            index, rest = match.groups()
            rest = next((ours + rest[len(theirs):] for theirs, ours in _UMT5_BLOCK if rest.startswith(theirs)), rest)
            new = f"encoder.block.{index}.{rest}"
        out[new] = value
    return out


def umt5_to_reference(state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """transformers' UMT5 encoder in Wan-AI's names (the inverse of umt5_from_reference)."""
    out = {}
    for key, value in state.items():
        if key == "encoder.embed_tokens.weight":
            continue  # tied to shared.weight
        new = next((theirs + key[len(ours):] for theirs, ours in _UMT5_TOP if key.startswith(ours)), key)
        if match := re.fullmatch(r"encoder\.block\.(\d+)\.(.+)", key):
            index, rest = match.groups()
            rest = next((theirs + rest[len(ours):] for theirs, ours in _UMT5_BLOCK if rest.startswith(ours)), rest)
            new = f"blocks.{index}.{rest}"
        out[new] = value
    return out


def autoencoder(state: Mapping[str, torch.Tensor]) -> nn.Module:
    """AutoencoderKLWan (float32) of a vae file: Wan 2.1's in Wan-AI's layout (ComfyUI's wan_2.1_vae) or diffusers',
    Wan 2.2's (48 channels, residual stages) in diffusers' (its folder's vae/diffusion_pytorch_model.safetensors): the
    published structure and latent statistics of its kind, its widths from the shapes."""
    from accelerate import init_empty_weights
    from diffusers import AutoencoderKLWan
    from diffusers.loaders.single_file_utils import convert_wan_vae_to_diffusers

    layout = vae_layout(state)
    if layout == "nested":
        raise ModelLoadError("ae: the file is the 48-channel Wan autoencoder in Wan-AI's layout (wan2.2_vae.safetensors), "
                             "which diffusers' convert_wan_vae_to_diffusers does not read: give the diffusers VAE's "
                             "file (vae/diffusion_pytorch_model.safetensors of Wan-AI/Wan2.2-TI2V-5B-Diffusers)")
    if not layout:
        raise ModelLoadError("ae: the file has no encoder.conv1 / conv2 (or diffusers' encoder.conv_in / "
                             "post_quant_conv) weights: it is not a Wan autoencoder (wan_2.1_vae.safetensors)")
    weights = convert_wan_vae_to_diffusers(dict(state)) if layout == "wan21" else dict(state)
    residual = any(".downsampler." in k for k in weights)  # Wan 2.2's stages (WanResidualDownBlock)
    config = published("vae22" if residual else "vae")
    latents = weights["post_quant_conv.weight"].shape[0]
    if latents != config["z_dim"]:
        raise ModelLoadError(f"ae: the autoencoder has {latents} latent channels; a Wan autoencoder with "
                             f"{'residual' if residual else 'plain'} stages has {config['z_dim']} "
                             "(wan_2.1_vae.safetensors: 16, the TI2V 5B's: 48)")
    base = weights["encoder.conv_in.weight"].shape[0]
    config.update(base_dim=base, **(_residual_sizes(weights, base) if residual else _sizes(weights, base)))
    with init_empty_weights():
        model = AutoencoderKLWan.from_config(config)
    return fill_meta(model, weights, torch.float32, "autoencoder")


def _sizes(weights: Mapping[str, torch.Tensor], base: int) -> dict[str, Any]:
    """Wan 2.1's stage widths and temporal downsampling, read from its decoder's stages."""
    up, stages = "decoder.up_blocks.{}.", count(weights, "decoder.up_blocks.")
    return {"dim_mult": [weights[up.format(i) + "resnets.0.conv2.weight"].shape[0] // base
                         for i in reversed(range(stages))],
            "temperal_downsample": [up.format(i) + "upsamplers.0.time_conv.weight" in weights
                                    for i in reversed(range(stages - 1))]}


def _residual_sizes(weights: Mapping[str, torch.Tensor], base: int) -> dict[str, Any]:
    """Wan 2.2's (its patchified in and out channels and its wider decoder too), read from its encoder's stages."""
    down, stages = "encoder.down_blocks.{}.", count(weights, "encoder.down_blocks.")
    dim_mult = [weights[down.format(i) + "resnets.0.conv2.weight"].shape[0] // base for i in range(stages)]
    return {"dim_mult": dim_mult, "in_channels": weights["encoder.conv_in.weight"].shape[1],
            "out_channels": weights["decoder.conv_out.weight"].shape[0],
            "decoder_base_dim": weights["decoder.conv_in.weight"].shape[0] // dim_mult[-1],
            "temperal_downsample": [down.format(i) + "downsampler.time_conv.weight" in weights
                                    for i in range(stages - 1)]}


# the names of a residual block's layers: diffusers' -> Wan-AI's
_RESIDUAL = (("norm1.gamma", "residual.0.gamma"), ("conv1.", "residual.2."), ("norm2.gamma", "residual.3.gamma"),
             ("conv2.", "residual.6."), ("conv_shortcut.", "shortcut."))
_TOP = {"quant_conv": "conv1", "post_quant_conv": "conv2", "encoder.conv_in": "encoder.conv1",
        "decoder.conv_in": "decoder.conv1", "encoder.norm_out.gamma": "encoder.head.0.gamma",
        "decoder.norm_out.gamma": "decoder.head.0.gamma", "encoder.conv_out": "encoder.head.2",
        "decoder.conv_out": "decoder.head.2"}


def vae_to_reference(state: Mapping[str, torch.Tensor], resnets: int = 3) -> dict[str, torch.Tensor]:
    """An AutoencoderKLWan's weights in Wan-AI's layout (wan_2.1_vae.safetensors), the inverse of diffusers'
    convert_wan_vae_to_diffusers (which takes the published structure: `resnets` residual blocks and an upsampler
    per decoder stage)."""
    return {_vae_key(key, resnets): value for key, value in state.items()}


def _vae_key(key: str, resnets: int) -> str:
    for ours, theirs in _TOP.items():
        if key == ours or key.startswith(ours + "."):
            return theirs + key[len(ours):]
    if match := re.fullmatch(r"(encoder|decoder)\.mid_block\.(resnets|attentions)\.(\d+)\.(.+)", key):
        side, kind, index, rest = match.groups()
        return (f"{side}.middle.{2 * int(index)}.{_residual(rest)}" if kind == "resnets" else
                f"{side}.middle.1.{rest}")
    if match := re.fullmatch(r"encoder\.down_blocks\.(\d+)\.(.+)", key):
        return f"encoder.downsamples.{match[1]}.{_residual(match[2])}"
    if match := re.fullmatch(r"decoder\.up_blocks\.(\d+)\.resnets\.(\d+)\.(.+)", key):
        return f"decoder.upsamples.{int(match[1]) * (resnets + 1) + int(match[2])}.{_residual(match[3])}"
    if match := re.fullmatch(r"decoder\.up_blocks\.(\d+)\.upsamplers\.0\.(.+)", key):
        return f"decoder.upsamples.{int(match[1]) * (resnets + 1) + resnets}.{match[2]}"
    return key


def _residual(rest: str) -> str:
    return next((theirs + rest[len(ours):] for ours, theirs in _RESIDUAL if rest.startswith(ours)), rest)
