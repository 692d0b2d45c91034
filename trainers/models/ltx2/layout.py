"""LTX-2's single files in Lightricks' layout (torch-free): `ltx-2-19b-dev.safetensors`, which ComfyUI loads as a
checkpoint too, holds the transformer under `model.diffusion_model.` with its two text connectors
(`video_embeddings_connector.`, `audio_embeddings_connector.`), the connectors' projection of Gemma 3's stacked states
at the top (`text_embedding_projection.aggregate_embed.`), the video autoencoder under `vae.`, the audio autoencoder
under `audio_vae.` and the vocoder under `vocoder.`; its `config` metadata (JSON) has what the shapes do not tell.

Reading goes through diffusers' own converters where it has them (convert_ltx2_transformer_to_diffusers and the two
autoencoders'); the connectors' and the vocoder's names follow diffusers' scripts/convert_ltx2_to_diffusers.py. The
way back (diffusers' names to Lightricks') writes the tests' files.
"""
from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import TypeVar

T = TypeVar("T")

DIFFUSION = "model.diffusion_model."
PREFIXES = (DIFFUSION, "diffusion_model.", "")  # Lightricks' and ComfyUI's nesting of the transformer
PROJECTION = "text_embedding_projection.aggregate_embed."
CONNECTORS = ("video_embeddings_connector.", "audio_embeddings_connector.")
VAE, AUDIO_VAE, VOCODER = "vae.", "audio_vae.", "vocoder."
MARKER = "audio_adaln_single."  # the audio stream's timestep embedding: LTX-2's own

# Lightricks' names -> diffusers', inside the connectors and the vocoder (replaced in this order)
_CONNECTOR_NAMES = (("video_embeddings_connector.", "video_connector."), ("audio_embeddings_connector.",
                                                                           "audio_connector."),
                    ("transformer_1d_blocks.", "transformer_blocks."), (".q_norm.", ".norm_q."),
                    (".k_norm.", ".norm_k."))
_VOCODER_NAMES = (("ups.", "upsamplers."), ("resblocks.", "resnets."), ("conv_pre.", "conv_in."),
                  ("conv_post.", "conv_out."))
# diffusers' transformer names -> Lightricks' (the inverse of convert_ltx2_transformer_to_diffusers)
_TRANSFORMER_BACK = (("av_cross_attn_video_scale_shift", "av_ca_video_scale_shift_adaln_single"),
                     ("av_cross_attn_video_a2v_gate", "av_ca_a2v_gate_adaln_single"),
                     ("av_cross_attn_audio_scale_shift", "av_ca_audio_scale_shift_adaln_single"),
                     ("av_cross_attn_audio_v2a_gate", "av_ca_v2a_gate_adaln_single"),
                     ("video_a2v_cross_attn_scale_shift_table", "scale_shift_table_a2v_ca_video"),
                     ("audio_a2v_cross_attn_scale_shift_table", "scale_shift_table_a2v_ca_audio"),
                     ("norm_q", "q_norm"), ("norm_k", "k_norm"), ("proj_in", "patchify_proj"))
_STATISTICS = (("latents_mean", "per_channel_statistics.mean-of-means"),
               ("latents_std", "per_channel_statistics.std-of-means"))


def transformer_prefix(names: Iterable[str]) -> str:
    """Where a file nests the transformer: the first of PREFIXES under which its audio timestep embedding is."""
    keys = set(names)
    return next((p for p in PREFIXES if any(k.startswith(p + MARKER) for k in keys)), DIFFUSION)


def _renamed(key: str, pairs: tuple[tuple[str, str], ...]) -> str:
    for old, new in pairs:
        key = key.replace(old, new)
    return key


# --- reading: Lightricks' names -> diffusers' ---

def connectors_from_reference(within: Mapping[str, T], projection: Mapping[str, T]) -> dict[str, T]:
    """LTX2TextConnectors' weights of the transformer's connector tensors (`within`: its prefix removed) and the
    projection's (`projection`: PROJECTION removed)."""
    out = {_renamed(k, _CONNECTOR_NAMES): v for k, v in within.items() if k.startswith(CONNECTORS)}
    out.update({f"text_proj_in.{k}": v for k, v in projection.items()})
    return out


def vocoder_from_reference(state: Mapping[str, T]) -> dict[str, T]:
    """LTX2Vocoder's weights of the vocoder's tensors (VOCODER removed)."""
    return {_renamed(k, _VOCODER_NAMES): v for k, v in state.items()}


# --- writing: diffusers' names -> Lightricks' (the tests' files) ---

def transformer_to_reference(state: Mapping[str, T]) -> dict[str, T]:
    """An LTX2VideoTransformer3DModel's weights under Lightricks' names (DIFFUSION not added)."""
    out = {}
    for key, value in state.items():
        for ours, theirs in (("time_embed.", "adaln_single."), ("audio_time_embed.", "audio_adaln_single.")):
            if key.startswith(ours):
                key = theirs + key[len(ours):]
        out[_renamed(key, _TRANSFORMER_BACK)] = value
    return out


def connectors_to_reference(state: Mapping[str, T]) -> dict[str, T]:
    """LTX2TextConnectors' weights where the single file has them (full names: DIFFUSION and PROJECTION)."""
    back = tuple((new, old) for old, new in _CONNECTOR_NAMES)
    return {PROJECTION + k.removeprefix("text_proj_in.") if k.startswith("text_proj_in.") else
            DIFFUSION + _renamed(k, back): v for k, v in state.items()}


def vae_to_reference(state: Mapping[str, T]) -> dict[str, T]:
    """An AutoencoderKLLTX2Video's weights under Lightricks' names (VAE not added): each stage and its resampler
    numbered in one sequence (the encoder's mid block last, the decoder's first), `res_blocks`, the latent
    statistics as `per_channel_statistics`."""
    return {_vae_key(_renamed(k, _STATISTICS)).replace(".resnets.", ".res_blocks."): v for k, v in state.items()}


def _vae_key(key: str) -> str:
    if match := re.fullmatch(r"encoder\.down_blocks\.(\d+)\.downsamplers\.0\.(.+)", key):
        return f"encoder.down_blocks.{2 * int(match[1]) + 1}.{match[2]}"
    if match := re.fullmatch(r"encoder\.down_blocks\.(\d+)\.(.+)", key):
        return f"encoder.down_blocks.{2 * int(match[1])}.{match[2]}"
    if key.startswith("encoder.mid_block."):
        return "encoder.down_blocks.8." + key.removeprefix("encoder.mid_block.")
    if key.startswith("decoder.mid_block."):
        return "decoder.up_blocks.0." + key.removeprefix("decoder.mid_block.")
    if match := re.fullmatch(r"decoder\.up_blocks\.(\d+)\.upsamplers\.0\.(.+)", key):
        return f"decoder.up_blocks.{2 * int(match[1]) + 1}.{match[2]}"
    if match := re.fullmatch(r"decoder\.up_blocks\.(\d+)\.(.+)", key):
        return f"decoder.up_blocks.{2 * int(match[1]) + 2}.{match[2]}"
    return key


def audio_vae_to_reference(state: Mapping[str, T]) -> dict[str, T]:
    """An AutoencoderKLLTX2Audio's weights under Lightricks' names (AUDIO_VAE not added)."""
    return {_renamed(k, _STATISTICS): v for k, v in state.items()}


def vocoder_to_reference(state: Mapping[str, T]) -> dict[str, T]:
    """An LTX2Vocoder's weights under Lightricks' names (VOCODER not added)."""
    return {_renamed(k, tuple((new, old) for old, new in _VOCODER_NAMES)): v for k, v in state.items()}


# --- what a file is, told from its names ---

# tensors of LTX-2.3's and later layouts (the prompt's own modulation, gated attention, per-modality projections)
_LATER = ("prompt_adaln_single.", ".to_gate_logits.", "text_embedding_projection.video_aggregate_embed.")
# the scales beside quantized weights: Lightricks' fp8 / fp4 files (scaled matmuls), ComfyUI's scaled files
_SCALES = (".weight_scale", ".weight_scale_2", ".input_scale", ".scale_weight", "scaled_fp8", ".comfy_quant")


def later_layout(names: Iterable[str]) -> str:
    """The first tensor of a layout after LTX-2.0's (LTX-2.3, LTX-2.5), "" when there is none."""
    return next((k for k in names if any(mark in k for mark in _LATER)), "")


def quantized(names: Iterable[str]) -> str:
    """The first scale of a quantized weight (fp8 or fp4 with scales), "" when there is none."""
    return next((k for k in names if k.endswith(_SCALES)), "")
