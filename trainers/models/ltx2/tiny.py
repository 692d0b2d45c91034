"""A tiny random-init LTX-2 pipeline (tests) of the real diffusers classes: a two-block LTX2VideoTransformer3DModel
(its video and audio streams, the audio one frozen in training), a causal AutoencoderKLLTX2Video with the published
structure and compression (8x in time: 1 + 8k frames to 1 + k; 32x in space: 4x4 patches, then three 2x stages), an
AutoencoderKLLTX2Audio and an LTX2Vocoder (sampled, not trained), a two-layer Gemma3ForConditionalGeneration text
encoder (a tiny SigLIP vision tower beside, as the published folder's; Gemma 3 12B's sliding window and rope) with a
character-level tokenizer, the LTX2TextConnectors (their learnable registers: 128, as published) and the flow-matching
scheduler of its folder."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from trainers.models.zimage.tiny import write_tiny_qwen_tokenizer

LATENT_CHANNELS = 8  # the published 128
TEXT_WIDTH = 32  # the tiny Gemma 3's hidden size (the published 3840)
TEXT_LAYERS = 2  # its layers: the connectors read all 3 hidden states (the published 48 + 1)
CONNECTOR_WIDTH = 32  # the connectors' 4 heads x 8 (the published 30 x 128 = 3840)
AUDIO_CHANNELS, MEL_BINS = 2, 16  # the audio VAE's latent channels and mel bins (the published 8 and 64)
ARCH = Path(__file__).with_name("arch")  # the published configs, which a single file's parts are built with
# what Gemma 3 12B's text config sets beyond its sizes (its sliding window and rope): the tiny's, so that the text
# encoder of a single file (built with them) computes what the tiny folder's does
GEMMA3_SETTINGS = ("sliding_window", "query_pre_attn_scalar", "rope_parameters")
# the published scheduler config (Lightricks/LTX-2 scheduler/scheduler_config.json, as ai-toolkit writes it)
SCHEDULER = {"base_image_seq_len": 1024, "base_shift": 0.95, "max_image_seq_len": 4096, "max_shift": 2.05,
             "shift": 1.0, "shift_terminal": 0.1, "time_shift_type": "exponential", "use_dynamic_shifting": True}


def tiny_ltx2_vae() -> Any:
    """The published structure (four encoder stages: spatial, temporal and two spatio-temporal downsamplers; three
    decoder stages), each stage's width doubled as published from 8 latent channels, one layer a stage."""
    from diffusers import AutoencoderKLLTX2Video

    vae = AutoencoderKLLTX2Video(
        latent_channels=LATENT_CHANNELS, block_out_channels=(16, 32, 64, 128), decoder_block_out_channels=(16, 32, 64),
        layers_per_block=(1,) * 5, decoder_layers_per_block=(1,) * 4, decoder_causal=False,
        spatial_compression_ratio=32, temporal_compression_ratio=8)
    # the published latents' per-channel statistics are not zero and one: the tiny's are not either
    vae.latents_mean.copy_(torch.linspace(-0.1, 0.1, LATENT_CHANNELS))
    vae.latents_std.copy_(torch.linspace(0.8, 1.2, LATENT_CHANNELS))
    return vae


def tiny_ltx2_transformer() -> Any:
    from diffusers import LTX2VideoTransformer3DModel

    return LTX2VideoTransformer3DModel(
        in_channels=LATENT_CHANNELS, out_channels=LATENT_CHANNELS, num_attention_heads=2, attention_head_dim=16,
        cross_attention_dim=32, audio_in_channels=AUDIO_CHANNELS * MEL_BINS // 4,
        audio_out_channels=AUDIO_CHANNELS * MEL_BINS // 4, audio_num_attention_heads=2, audio_attention_head_dim=8,
        audio_cross_attention_dim=16, num_layers=2, caption_channels=CONNECTOR_WIDTH, rope_type="split")


def tiny_gemma3(vocab_size: int, pad_token_id: int) -> Any:
    from transformers import Gemma3Config, Gemma3ForConditionalGeneration

    published = json.loads((ARCH / "text_encoder" / "config.json").read_text(encoding="utf-8"))
    config = Gemma3Config(
        text_config={"vocab_size": vocab_size, "hidden_size": TEXT_WIDTH, "intermediate_size": 64,
                     "num_hidden_layers": TEXT_LAYERS, "num_attention_heads": 2, "num_key_value_heads": 1,
                     "head_dim": 16, "pad_token_id": pad_token_id, "bos_token_id": None,
                     "eos_token_id": pad_token_id, **{k: published[k] for k in GEMMA3_SETTINGS}},
        vision_config={"hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2,
                       "image_size": 28, "patch_size": 14},
        mm_tokens_per_image=4, pad_token_id=pad_token_id, image_token_index=vocab_size - 1,
        boi_token_index=vocab_size - 1, eoi_token_index=vocab_size - 1)
    return Gemma3ForConditionalGeneration(config)


def tiny_connectors() -> Any:
    from diffusers.pipelines.ltx2 import LTX2TextConnectors

    return LTX2TextConnectors(
        caption_channels=TEXT_WIDTH, text_proj_in_factor=TEXT_LAYERS + 1, video_connector_num_attention_heads=4,
        video_connector_attention_head_dim=8, video_connector_num_layers=1, audio_connector_num_attention_heads=4,
        audio_connector_attention_head_dim=8, audio_connector_num_layers=1, connector_rope_base_seq_len=1024,
        rope_type="split")


def tiny_audio_parts() -> tuple[Any, Any]:
    from diffusers import AutoencoderKLLTX2Audio
    from diffusers.pipelines.ltx2.vocoder import LTX2Vocoder

    audio_vae = AutoencoderKLLTX2Audio(base_channels=AUDIO_CHANNELS * MEL_BINS // 4, output_channels=2,
                                       ch_mult=(1, 2, 2), num_res_blocks=1,
                                       in_channels=2, resolution=32, latent_channels=AUDIO_CHANNELS,
                                       mel_bins=MEL_BINS)
    vocoder = LTX2Vocoder(in_channels=2 * MEL_BINS, hidden_channels=16, out_channels=2, upsample_kernel_sizes=[4, 4],
                          upsample_factors=[2, 2], resnet_kernel_sizes=[3], resnet_dilations=[[1, 3, 5]],
                          output_sampling_rate=16000)
    return audio_vae, vocoder


def build_tiny_ltx2(folder: Path, seed: int = 0) -> Path:
    """Save a tiny LTX2Pipeline to `folder`."""
    from diffusers import FlowMatchEulerDiscreteScheduler, LTX2Pipeline
    from transformers import AutoTokenizer

    torch.manual_seed(seed)
    write_tiny_qwen_tokenizer(folder / "tokenizer")  # any tokenizer with a pad token reads like Gemma's here
    tokenizer = AutoTokenizer.from_pretrained(folder / "tokenizer")
    audio_vae, vocoder = tiny_audio_parts()
    pipe = LTX2Pipeline(scheduler=FlowMatchEulerDiscreteScheduler(**SCHEDULER), vae=tiny_ltx2_vae(),
                        audio_vae=audio_vae, text_encoder=tiny_gemma3(len(tokenizer), tokenizer.pad_token_id),
                        tokenizer=tokenizer, connectors=tiny_connectors(), transformer=tiny_ltx2_transformer(),
                        vocoder=vocoder)
    pipe.save_pretrained(folder)
    return folder
