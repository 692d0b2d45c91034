"""A tiny random-init SD1.x pipeline (tests and the demo)."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from trainers.models.tiny import text_config, tiny_vae, write_tiny_tokenizer


def build_tiny_sd1(folder: Path, seed: int = 0, v_prediction: bool = False, vae: Any = None) -> Path:
    """Save a tiny SD1.x-structured diffusers pipeline to `folder` and return it.

    Its native size is 64 px whatever the VAE (`tiny_vae()` unless given) scales latents down by.
    """
    from diffusers import DDIMScheduler, StableDiffusionPipeline, UNet2DConditionModel
    from transformers import CLIPTextModel, CLIPTokenizer

    torch.manual_seed(seed)
    vae = tiny_vae() if vae is None else vae
    tok_dir = folder / "tokenizer"
    write_tiny_tokenizer(tok_dir)
    tokenizer = CLIPTokenizer.from_pretrained(tok_dir)
    unet = UNet2DConditionModel(
        sample_size=64 // 2 ** (len(vae.config.block_out_channels) - 1),
        block_out_channels=(32, 64),
        layers_per_block=2,
        down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"),
        up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"),
        cross_attention_dim=32,
        attention_head_dim=8,
        norm_num_groups=32,
    )
    text_encoder = CLIPTextModel(text_config(len(tokenizer), 32))
    scheduler = DDIMScheduler(
        beta_start=0.00085, beta_end=0.012, beta_schedule="scaled_linear", clip_sample=False,
        set_alpha_to_one=False, steps_offset=1, prediction_type="v_prediction" if v_prediction else "epsilon",
    )
    pipe = StableDiffusionPipeline(
        unet=unet, vae=vae, text_encoder=text_encoder, tokenizer=tokenizer,
        scheduler=scheduler,
        safety_checker=None, feature_extractor=None, requires_safety_checker=False,
    )
    pipe.save_pretrained(folder)
    return folder
