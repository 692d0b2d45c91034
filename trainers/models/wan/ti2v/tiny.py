"""A tiny random-init Wan 2.2 TI2V 5B pipeline (tests): Wan 2.1's tiny text encoder and transformer (48 channels) and
a tiny AutoencoderKLWan of Wan 2.2's kind (48 latent channels, residual blocks, 2x2 patches into it: 16x in space),
in a WanPipeline with expand_timesteps, as the published folder lays it out."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from trainers.models.tiny_flow import write_tiny_t5_tokenizer
from trainers.models.wan.tiny import tiny_umt5, tiny_wan_transformer

LATENT_CHANNELS = 48


def tiny_wan22_vae() -> Any:
    from diffusers import AutoencoderKLWan

    mean = [round(0.02 * (i % 7) - 0.06, 3) for i in range(LATENT_CHANNELS)]
    std = [round(0.8 + 0.05 * (i % 5), 3) for i in range(LATENT_CHANNELS)]
    return AutoencoderKLWan(base_dim=8, z_dim=LATENT_CHANNELS, dim_mult=[1, 1, 1, 1], num_res_blocks=1,
                            attn_scales=[], temperal_downsample=[False, True, True], is_residual=True, patch_size=2,
                            in_channels=12, out_channels=12, scale_factor_spatial=16, latents_mean=mean,
                            latents_std=std)


def build_tiny_wan22_ti2v(folder: Path, seed: int = 0) -> Path:
    """Save a tiny WanPipeline (expand_timesteps) of Wan 2.2 TI2V 5B's layout to `folder`."""
    from diffusers import FlowMatchEulerDiscreteScheduler, WanPipeline
    from transformers import T5TokenizerFast

    torch.manual_seed(seed)
    write_tiny_t5_tokenizer(folder / "tokenizer")
    tokenizer = T5TokenizerFast.from_pretrained(folder / "tokenizer")
    pipe = WanPipeline(tokenizer=tokenizer, text_encoder=tiny_umt5(len(tokenizer)), vae=tiny_wan22_vae(),
                       scheduler=FlowMatchEulerDiscreteScheduler(shift=5.0),
                       transformer=tiny_wan_transformer(LATENT_CHANNELS, LATENT_CHANNELS), expand_timesteps=True)
    pipe.save_pretrained(folder)
    return folder
