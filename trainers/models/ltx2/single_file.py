"""LTX-2's modules from Lightricks' single file (layout.py) and ComfyUI's Gemma 3 file: each built on the meta device
from its published LTX-2.0 config (arch/), the sizes its tensor shapes tell, and what the file's `config` metadata
says that the shapes do not (attention heads, rope, the vocoder's upsampling rates: Lightricks' own names, as its
ltx-core reads them), then filled with the file's weights renamed to diffusers' (diffusers' own converters for the
transformer and both autoencoders)."""
from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from trainers.models.base import ModelFiles, ModelLoadError
from trainers.models.component_files import component, fill_meta, llm_text_encoder
from trainers.models.ltx2 import layout
from trainers.models.ltx2.rules import ARCH, TEXT_ENCODER, VIDEO_VAE
from trainers.models.reference_layout import count

if TYPE_CHECKING:
    from trainers.models.single_file.checkpoint import Checkpoint

Shapes = Mapping[str, tuple[int, ...]]
# Lightricks' transformer metadata -> diffusers' config (ltx-core's LTXModelConfigurator names)
_TRANSFORMER_META = (("norm_eps", "norm_eps"), ("rope_type", "rope_type"), ("positional_embedding_theta", "rope_theta"),
                     ("timestep_scale_multiplier", "timestep_scale_multiplier"),
                     ("av_ca_timestep_scale_multiplier", "cross_attn_timestep_scale_multiplier"))
_CONNECTOR_META = (("rope_type", "rope_type"), ("positional_embedding_theta", "rope_theta"))
# where transformers' Gemma3ForConditionalGeneration keeps its language model (4.x, 5.x) and what it holds
_LANGUAGE_MODEL = ("language_model.model.", "model.language_model.")
_LANGUAGE_PARTS = ("embed_tokens.", "layers.", "norm.")
# the libraries LTX2Pipeline's model_index.json names for the parts a saved folder keeps
KEPT_LIBRARIES = {"connectors": "ltx2", "audio_vae": "diffusers", "vocoder": "ltx2"}
_VOCODER_META = (("upsample_rates", "upsample_factors"), ("resblock_dilation_sizes", "resnet_dilations"),
                 ("output_sampling_rate", "output_sampling_rate"))


def published(component_name: str) -> dict[str, Any]:
    config = json.loads((ARCH / component_name / "config.json").read_text(encoding="utf-8"))
    return {k: v for k, v in config.items() if not k.startswith("_")}


def file_config(ckpt: "Checkpoint") -> dict[str, Any]:
    """The file's `config` metadata (Lightricks' JSON of every part's settings); {} when it has none."""
    try:
        found = json.loads(ckpt.metadata.get("config") or "{}")
    except ValueError:
        return {}
    return found if isinstance(found, dict) else {}


def _shape(shapes: Shapes, key: str, what: str) -> tuple[int, ...]:
    if key not in shapes:
        raise ModelLoadError(f"the LTX-2 {what} has no {key}: is the file complete?")
    return tuple(shapes[key])


def _from_meta(config: dict[str, Any], section: Mapping[str, Any], names: tuple[tuple[str, str], ...]) -> None:
    config.update({ours: section[theirs] for theirs, ours in names if theirs in section})
    if "frequencies_precision" in section:
        config["rope_double_precision"] = section["frequencies_precision"] == "float64"


def _heads(inner: int, section: Mapping[str, Any], heads_key: str, width_key: str, width: int) -> tuple[int, int]:
    """(heads, head width) of an attention `inner` wide: the metadata's heads, else its (or the published) width."""
    if section.get(heads_key):
        return int(section[heads_key]), inner // int(section[heads_key])
    width = int(section.get(width_key) or width)
    return max(1, inner // width), width


# --- the configs ---

def transformer_config(shapes: Shapes, meta: Mapping[str, Any]) -> dict[str, Any]:
    """LTX2VideoTransformer3DModel's config of a file's transformer (shapes in diffusers' names)."""
    config, section = published("transformer"), meta.get("transformer") or {}
    _from_meta(config, section, _TRANSFORMER_META)
    if len(section.get("positional_embedding_max_pos") or ()) == 3:
        config["pos_embed_max_pos"], config["base_height"], config["base_width"] = \
            section["positional_embedding_max_pos"]
    if section.get("audio_positional_embedding_max_pos"):
        config["audio_pos_embed_max_pos"] = section["audio_positional_embedding_max_pos"][0]
    video, audio = (_shape(shapes, f"{stream}proj_in.weight", "transformer") for stream in ("", "audio_"))
    config["num_attention_heads"], config["attention_head_dim"] = _heads(
        video[0], section, "num_attention_heads", "attention_head_dim", config["attention_head_dim"])
    config["audio_num_attention_heads"], config["audio_attention_head_dim"] = _heads(
        audio[0], section, "audio_num_attention_heads", "audio_attention_head_dim", config["audio_attention_head_dim"])
    captions = shapes.get("caption_projection.linear_1.weight")
    config.update(
        in_channels=video[1], out_channels=_shape(shapes, "proj_out.weight", "transformer")[0],
        audio_in_channels=audio[1], audio_out_channels=_shape(shapes, "audio_proj_out.weight", "transformer")[0],
        num_layers=count(shapes, "transformer_blocks."), use_prompt_embeddings=captions is not None,
        caption_channels=captions[1] if captions is not None else config["caption_channels"],
        cross_attention_dim=_shape(shapes, "transformer_blocks.0.attn2.to_k.weight", "transformer")[1],
        audio_cross_attention_dim=_shape(shapes, "transformer_blocks.0.audio_attn2.to_k.weight", "transformer")[1])
    return config


def connectors_config(shapes: Shapes, meta: Mapping[str, Any]) -> dict[str, Any]:
    """LTX2TextConnectors' config of a file's connectors and projection (shapes in diffusers' names)."""
    config, section = published("connectors"), meta.get("transformer") or {}
    _from_meta(config, section, _CONNECTOR_META)
    if section.get("connector_positional_embedding_max_pos"):
        config["connector_rope_base_seq_len"] = section["connector_positional_embedding_max_pos"][0]
    width, stacked = _shape(shapes, "text_proj_in.weight", "text projection")
    config.update(caption_channels=width, text_proj_in_factor=stacked // width)
    for stream in ("video", "audio"):
        prefix = f"{stream}_connector."
        inner = _shape(shapes, f"{prefix}transformer_blocks.0.attn1.to_q.weight", "text connectors")[0]
        own = "audio_" if stream == "audio" else ""
        heads_key = f"{own}connector_num_attention_heads" if f"{own}connector_num_attention_heads" in section \
            else "connector_num_attention_heads"
        width_key = f"{own}connector_attention_head_dim" if f"{own}connector_attention_head_dim" in section \
            else "connector_attention_head_dim"
        heads, head_width = _heads(inner, section, heads_key, width_key,
                                   config[f"{stream}_connector_attention_head_dim"])
        registers = shapes.get(f"{prefix}learnable_registers")
        config.update({f"{stream}_connector_num_attention_heads": heads,
                       f"{stream}_connector_attention_head_dim": head_width,
                       f"{stream}_connector_num_layers": count(shapes, f"{prefix}transformer_blocks."),
                       f"{stream}_connector_num_learnable_registers": registers[0] if registers else None})
    return config


def vae_config(shapes: Shapes) -> dict[str, Any]:
    """AutoencoderKLLTX2Video's config of a file's video autoencoder (shapes in diffusers' names): the published
    structure (its stages' resamplers) with the widths, depths, latent channels and patch the shapes tell."""
    config = published("vae")

    def width(block: str) -> int:
        return _shape(shapes, f"{block}.resnets.0.conv1.conv.weight", "video autoencoder")[0]

    stages, ups = count(shapes, "encoder.down_blocks."), count(shapes, "decoder.up_blocks.")
    factors = list(reversed(config["upsample_factor"]))
    if stages != len(config["down_block_types"]) or ups != len(factors):
        raise ModelLoadError(f"the LTX-2 video autoencoder has {stages} encoder and {ups} decoder stages; LTX-2.0's "
                             f"has {len(config['down_block_types'])} and {len(factors)}: is it LTX-2's?")
    encoder = [f"encoder.down_blocks.{i}" for i in range(stages)] + ["encoder.mid_block"]
    decoder = ["decoder.mid_block"] + [f"decoder.up_blocks.{i}" for i in range(ups)]
    config.update(
        latent_channels=_shape(shapes, "decoder.conv_in.conv.weight", "video autoencoder")[1],
        patch_size=math.isqrt(_shape(shapes, "encoder.conv_in.conv.weight", "video autoencoder")[1] // 3),
        block_out_channels=[width(block) for block in encoder[1:]],
        layers_per_block=[count(shapes, f"{block}.resnets.") for block in encoder],
        decoder_block_out_channels=list(reversed([width(f"decoder.up_blocks.{i}") * factors[i] for i in range(ups)])),
        decoder_layers_per_block=list(reversed([count(shapes, f"{block}.resnets.") for block in decoder])),
        timestep_conditioning=any(k.startswith("decoder.time_embedder.") for k in shapes))
    return config


def audio_vae_config(shapes: Shapes, audio_in_channels: int) -> dict[str, Any]:
    """AutoencoderKLLTX2Audio's config (shapes in diffusers' names); its mel bins from what the transformer's audio
    stream reads (latent channels x the mel bins its encoder leaves)."""
    config = published("audio_vae")
    base, inputs = _shape(shapes, "encoder.conv_in.conv.weight", "audio autoencoder")[:2]
    levels = count(shapes, "encoder.down.")
    latents = _shape(shapes, "decoder.conv_in.conv.weight", "audio autoencoder")[1]
    config.update(base_channels=base, in_channels=inputs, latent_channels=latents,
                  output_channels=_shape(shapes, "decoder.conv_out.conv.weight", "audio autoencoder")[0],
                  ch_mult=[_shape(shapes, f"encoder.down.{i}.block.0.conv2.conv.weight", "audio autoencoder")[0] // base
                           for i in range(levels)],
                  num_res_blocks=count(shapes, "encoder.down.0.block."),
                  mel_bins=audio_in_channels * 2 ** (levels - 1) // latents)
    return config


def vocoder_config(shapes: Shapes, meta: Mapping[str, Any]) -> dict[str, Any]:
    """LTX2Vocoder's config (shapes in diffusers' names); its upsampling rates and dilations from the metadata, else
    the published ones."""
    config = published("vocoder")
    _from_meta(config, meta.get("vocoder") or {}, _VOCODER_META)
    conv_in = _shape(shapes, "conv_in.weight", "vocoder")
    ups = count(shapes, "upsamplers.")
    kernels = count(shapes, "resnets.") // max(1, ups)
    config.update(in_channels=conv_in[1], hidden_channels=conv_in[0],
                  out_channels=_shape(shapes, "conv_out.weight", "vocoder")[0],
                  upsample_kernel_sizes=[shapes[f"upsamplers.{i}.weight"][2] for i in range(ups)],
                  resnet_kernel_sizes=[shapes[f"resnets.{j}.convs1.0.weight"][2] for j in range(kernels)])
    if len(config["upsample_factors"]) != ups or len(config["resnet_dilations"]) != kernels:
        raise ModelLoadError(f"the LTX-2 vocoder has {ups} upsamplers and {kernels} kernels a stage, which its file's "
                             "metadata does not describe (upsample_rates, resblock_dilation_sizes): is it LTX-2.0's?")
    return config


# --- the modules ---

def _built(cls: Any, config: dict[str, Any], weights: Mapping[str, torch.Tensor], dtype: torch.dtype,
           what: str) -> nn.Module:
    from accelerate import init_empty_weights

    with init_empty_weights():
        model = cls.from_config(config)
    return fill_meta(model, weights, dtype, f"LTX-2 {what}")


def _shapes_of(state: Mapping[str, torch.Tensor]) -> dict[str, tuple[int, ...]]:
    return {k: tuple(v.shape) for k, v in state.items()}


def transformer(ckpt: "Checkpoint", dtype: torch.dtype) -> nn.Module:
    """The model file's LTX2VideoTransformer3DModel (its connectors left out)."""
    from diffusers import LTX2VideoTransformer3DModel
    from diffusers.loaders.single_file_utils import convert_ltx2_transformer_to_diffusers

    prefix = layout.transformer_prefix(ckpt.shapes)
    weights = convert_ltx2_transformer_to_diffusers({k[len(prefix):]: v for k, v in ckpt.tensors(prefix).items()
                                                     if not k[len(prefix):].startswith(layout.PROJECTION)})
    config = transformer_config(_shapes_of(weights), file_config(ckpt))
    return _built(LTX2VideoTransformer3DModel, config, weights, dtype, "transformer")


def connectors(ckpt: "Checkpoint", dtype: torch.dtype | None = None) -> nn.Module:
    """The model file's LTX2TextConnectors (in `dtype`; None: the file's own)."""
    from diffusers.pipelines.ltx2 import LTX2TextConnectors

    prefix = layout.transformer_prefix(ckpt.shapes)
    within = {k[len(prefix):]: v for name in layout.CONNECTORS for k, v in ckpt.tensors(prefix + name).items()}
    projection = ckpt.tensors(layout.PROJECTION) or ckpt.tensors(prefix + layout.PROJECTION)  # or inside it
    weights = layout.connectors_from_reference(within, {k.split(layout.PROJECTION, 1)[1]: v
                                                        for k, v in projection.items()})
    return _built(LTX2TextConnectors, connectors_config(_shapes_of(weights), file_config(ckpt)), weights,
                  dtype or _dtype_of(weights), "text connectors")


def _dtype_of(weights: Mapping[str, torch.Tensor]) -> torch.dtype:
    return next((v.dtype for v in weights.values() if v.is_floating_point()), torch.float32)


def video_vae(ckpt: "Checkpoint", files: ModelFiles) -> nn.Module:
    """AutoencoderKLLTX2Video (float32) of the model file's `vae.` tensors or of the `ae` file."""
    from diffusers import AutoencoderKLLTX2Video
    from diffusers.loaders.single_file_utils import convert_ltx2_vae_to_diffusers

    state = component(ckpt, VIDEO_VAE.prefix, files.ae, VIDEO_VAE.what, "ae")
    weights = convert_ltx2_vae_to_diffusers({k.removeprefix(layout.VAE): v for k, v in state.items()})
    weights = {k.replace("last_time_embedder", "time_embedder").replace("last_scale_shift_table", "scale_shift_table"):
               v for k, v in weights.items()}  # the timestep-conditioned decoder's (diffusers' conversion script)
    return _built(AutoencoderKLLTX2Video, vae_config(_shapes_of(weights)), weights, torch.float32, "video autoencoder")


def audio_parts(ckpt: "Checkpoint", dtype: torch.dtype | None = None) -> tuple[nn.Module, nn.Module]:
    """(AutoencoderKLLTX2Audio, LTX2Vocoder) of the model file (in `dtype`; None: the file's own)."""
    from diffusers import AutoencoderKLLTX2Audio
    from diffusers.loaders.single_file_utils import convert_ltx2_audio_vae_to_diffusers
    from diffusers.pipelines.ltx2.vocoder import LTX2Vocoder

    audio = convert_ltx2_audio_vae_to_diffusers(dict(ckpt.tensors(layout.AUDIO_VAE)))
    vocoder = layout.vocoder_from_reference({k[len(layout.VOCODER):]: v
                                             for k, v in ckpt.tensors(layout.VOCODER).items()})
    reads = ckpt.shapes[layout.transformer_prefix(ckpt.shapes) + "audio_patchify_proj.weight"][1]
    return (_built(AutoencoderKLLTX2Audio, audio_vae_config(_shapes_of(audio), reads), audio, dtype or _dtype_of(audio),
                   "audio autoencoder"),
            _built(LTX2Vocoder, vocoder_config(_shapes_of(vocoder), file_config(ckpt)), vocoder,
                   dtype or _dtype_of(vocoder), "vocoder"))


def write_kept_parts(path: Path, root: Path) -> dict[str, tuple[Path, list[str]]]:
    """The model file's connectors, audio autoencoder and vocoder as a diffusers folder keeps them (in the file's
    precision), written under `root`: what a finetune's saved folder copies (name -> its folder, its model_index.json
    entry)."""
    from trainers.models.single_file.checkpoint import open_checkpoint

    ckpt = open_checkpoint(path)
    written = {}
    for name, module in (("connectors", connectors(ckpt)), *zip(("audio_vae", "vocoder"), audio_parts(ckpt))):
        module.save_pretrained(root / name)
        written[name] = (root / name, [KEPT_LIBRARIES[name], type(module).__name__])
    return written


def gemma3(ckpt: "Checkpoint", files: ModelFiles, dtype: torch.dtype) -> tuple[nn.Module, Any]:
    """(Gemma3TextModel, its tokenizer): the `text_encoder` file in transformers' layout (ComfyUI's `model.layers...`;
    its vision tower, which LTX-2 does not read, left out), the tokenizer from tokenizer_cache_dir or the hub."""
    from trainers.models.flow_checkpoint import part_tokenizers

    state = component(ckpt, TEXT_ENCODER.prefix, files.text_encoder, TEXT_ENCODER.what, "text_encoder")
    renamed = {next((f"model.{k[len(p):]}" for p in _LANGUAGE_MODEL if k.startswith(p)), k): v
               for k, v in state.items()}
    language = {k: v for k, v in renamed.items() if k.removeprefix("model.").startswith(_LANGUAGE_PARTS)}
    (tokenizer,) = part_tokenizers((TEXT_ENCODER,), files.tokenizer_cache_dir)
    return llm_text_encoder(language, TEXT_ENCODER, dtype), tokenizer

