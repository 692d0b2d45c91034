"""A tiny random-init SDXL pipeline (tests)."""
from __future__ import annotations

from pathlib import Path

import torch

from trainers.models.tiny import text_config, tiny_vae, write_tiny_tokenizer


def build_tiny_sdxl(folder: Path, seed: int = 0) -> Path:
    """Save a tiny SDXL-structured diffusers pipeline (two text encoders) to `folder`."""
    from diffusers import EulerDiscreteScheduler, StableDiffusionXLPipeline, UNet2DConditionModel
    from transformers import CLIPTextModel, CLIPTextModelWithProjection, CLIPTokenizer

    torch.manual_seed(seed)
    for name in ("tokenizer", "tokenizer_2"):
        write_tiny_tokenizer(folder / name)
    tokenizer = CLIPTokenizer.from_pretrained(folder / "tokenizer")
    tokenizer_2 = CLIPTokenizer.from_pretrained(folder / "tokenizer_2")
    unet = UNet2DConditionModel(
        sample_size=8,  # 64 px through the 8x VAE
        block_out_channels=(32, 64),
        layers_per_block=2,
        down_block_types=("DownBlock2D", "CrossAttnDownBlock2D"),
        up_block_types=("CrossAttnUpBlock2D", "UpBlock2D"),
        transformer_layers_per_block=(1, 2),
        attention_head_dim=(2, 4),
        use_linear_projection=True,
        addition_embed_type="text_time",
        addition_time_embed_dim=8,
        projection_class_embeddings_input_dim=8 * 6 + 32,
        cross_attention_dim=64,
        norm_num_groups=32,
    )
    text_encoder = CLIPTextModel(text_config(len(tokenizer), 32))
    text_encoder_2 = CLIPTextModelWithProjection(text_config(len(tokenizer_2), 32, projection_dim=32))
    scheduler = EulerDiscreteScheduler(
        beta_start=0.00085, beta_end=0.012, beta_schedule="scaled_linear", steps_offset=1,
        timestep_spacing="leading",
    )
    pipe = StableDiffusionXLPipeline(
        unet=unet, vae=tiny_vae(), text_encoder=text_encoder, text_encoder_2=text_encoder_2,
        tokenizer=tokenizer, tokenizer_2=tokenizer_2, scheduler=scheduler,
    )
    pipe.save_pretrained(folder)
    return folder
