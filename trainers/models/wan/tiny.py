"""A tiny random-init Wan 2.1 text-to-video pipeline (tests) of the real diffusers classes: a two-block
WanTransformer3DModel, a causal AutoencoderKLWan (temporal compression 4, spatial 8, per-channel latent statistics),
a two-layer UMT5EncoderModel with a character-level T5 tokenizer built offline, and the flow-matching scheduler."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from trainers.models.tiny_flow import write_tiny_t5_tokenizer

LATENT_CHANNELS = 16  # as the real VAE's z_dim
TEXT_WIDTH = 32


def tiny_wan_vae() -> Any:
    """An AutoencoderKLWan downsampling 8x in space (three stages) and 4x in time (the last two), 16 latent channels
    with per-channel statistics, as the real one."""
    from diffusers import AutoencoderKLWan

    mean = [round(0.05 * (i % 5) - 0.1, 3) for i in range(LATENT_CHANNELS)]
    std = [round(1.0 + 0.1 * (i % 4), 3) for i in range(LATENT_CHANNELS)]
    return AutoencoderKLWan(base_dim=8, z_dim=LATENT_CHANNELS, dim_mult=[1, 1, 1, 1], num_res_blocks=1,
                            attn_scales=[], temperal_downsample=[False, True, True], latents_mean=mean,
                            latents_std=std)


def tiny_umt5(vocab_size: int) -> Any:
    from transformers import UMT5Config, UMT5EncoderModel

    return UMT5EncoderModel(UMT5Config(
        vocab_size=vocab_size, d_model=TEXT_WIDTH, d_kv=8, d_ff=64, num_layers=2, num_heads=4,
        relative_attention_num_buckets=8, feed_forward_proj="gated-gelu", is_encoder_decoder=False, use_cache=False,
        pad_token_id=0, eos_token_id=1, decoder_start_token_id=0))


def tiny_wan_transformer(in_channels: int = LATENT_CHANNELS, out_channels: int = LATENT_CHANNELS) -> Any:
    """`in_channels`: image-to-video's take the first frame's mask and latent too (16 + 4 + 16); TI2V 5B's 48."""
    from diffusers import WanTransformer3DModel

    return WanTransformer3DModel(patch_size=(1, 2, 2), num_attention_heads=2, attention_head_dim=8,
                                 in_channels=in_channels, out_channels=out_channels, text_dim=TEXT_WIDTH,
                                 freq_dim=16, ffn_dim=32, num_layers=2, cross_attn_norm=True,
                                 qk_norm="rms_norm_across_heads", rope_max_seq_len=64)


def build_tiny_wan(folder: Path, seed: int = 0) -> Path:
    """Save a tiny WanPipeline to `folder`."""
    from diffusers import FlowMatchEulerDiscreteScheduler, WanPipeline
    from transformers import T5TokenizerFast

    torch.manual_seed(seed)
    write_tiny_t5_tokenizer(folder / "tokenizer")
    tokenizer = T5TokenizerFast.from_pretrained(folder / "tokenizer")
    pipe = WanPipeline(tokenizer=tokenizer, text_encoder=tiny_umt5(len(tokenizer)), vae=tiny_wan_vae(),
                       scheduler=FlowMatchEulerDiscreteScheduler(shift=5.0), transformer=tiny_wan_transformer())
    pipe.save_pretrained(folder)
    return folder
