"""A tiny random-init Wan 2.1 I2V pipeline (tests): Wan 2.1's tiny parts with a 36-channel transformer taking image
features (image_dim, added_kv_proj_dim), a two-layer CLIPVisionModel and its CLIPImageProcessor, in a
WanImageToVideoPipeline as the published folder lays it out."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from trainers.models.tiny_flow import write_tiny_t5_tokenizer
from trainers.models.wan.tiny import LATENT_CHANNELS, TEXT_WIDTH, tiny_umt5, tiny_wan_vae

IMAGE_WIDTH = 16


def tiny_i2v_transformer() -> Any:
    from diffusers import WanTransformer3DModel

    return WanTransformer3DModel(patch_size=(1, 2, 2), num_attention_heads=2, attention_head_dim=8,
                                 in_channels=2 * LATENT_CHANNELS + 4, out_channels=LATENT_CHANNELS,
                                 text_dim=TEXT_WIDTH, freq_dim=16, ffn_dim=32, num_layers=2, cross_attn_norm=True,
                                 qk_norm="rms_norm_across_heads", rope_max_seq_len=64, image_dim=IMAGE_WIDTH,
                                 added_kv_proj_dim=16)


def build_tiny_wan21_i2v(folder: Path, seed: int = 0) -> Path:
    """Save a tiny WanImageToVideoPipeline (Wan 2.1 I2V's layout) to `folder`."""
    from diffusers import FlowMatchEulerDiscreteScheduler, WanImageToVideoPipeline
    from transformers import CLIPImageProcessor, CLIPVisionConfig, CLIPVisionModel, T5TokenizerFast

    torch.manual_seed(seed)
    write_tiny_t5_tokenizer(folder / "tokenizer")
    tokenizer = T5TokenizerFast.from_pretrained(folder / "tokenizer")
    encoder = CLIPVisionModel(CLIPVisionConfig(hidden_size=IMAGE_WIDTH, intermediate_size=32, num_hidden_layers=2,
                                               num_attention_heads=2, image_size=32, patch_size=8, projection_dim=16))
    processor = CLIPImageProcessor(size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32})
    pipe = WanImageToVideoPipeline(tokenizer=tokenizer, text_encoder=tiny_umt5(len(tokenizer)), vae=tiny_wan_vae(),
                                   scheduler=FlowMatchEulerDiscreteScheduler(shift=5.0), image_processor=processor,
                                   image_encoder=encoder, transformer=tiny_i2v_transformer())
    pipe.save_pretrained(folder)
    return folder
