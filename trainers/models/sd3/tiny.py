"""A tiny random-init SD3.5-medium-structured pipeline (tests): two joint blocks (the first with the extra
self-attention, the last context-pre-only), RMS q/k norms, CLIP-L, CLIP-G and T5 text encoders."""
from __future__ import annotations

from pathlib import Path

import torch

from trainers.models.tiny import text_config, write_tiny_tokenizer
from trainers.models.tiny_flow import t5_config, tiny_shifted_vae, write_tiny_t5_tokenizer


def build_tiny_sd3(folder: Path, seed: int = 0, reference_heads: bool = False) -> Path:
    """Save a tiny SD3 pipeline to `folder` and return it. `reference_heads`: CLIP heads as wide as the real
    encoders' (64), whose configs can be read back from the weights alone, as for sd-scripts' separate files."""
    from diffusers import FlowMatchEulerDiscreteScheduler, SD3Transformer2DModel, StableDiffusion3Pipeline
    from transformers import CLIPTextModelWithProjection, CLIPTokenizer, T5EncoderModel, T5TokenizerFast

    torch.manual_seed(seed)
    for name in ("tokenizer", "tokenizer_2"):
        write_tiny_tokenizer(folder / name)
    write_tiny_t5_tokenizer(folder / "tokenizer_3", max_length=256)
    tokenizers = [CLIPTokenizer.from_pretrained(folder / name) for name in ("tokenizer", "tokenizer_2")]
    if reference_heads:  # CLIP-G pads with "!", as SD3's own second tokenizer (and sd-scripts) does
        tokenizers[1].pad_token = "!"
        tokenizers[1].save_pretrained(folder / "tokenizer_2")
    tokenizer_3 = T5TokenizerFast.from_pretrained(folder / "tokenizer_3")
    clip_width, clip_heads, t5_width = (64, 1, 128) if reference_heads else (32, 4, 64)
    transformer = SD3Transformer2DModel(
        sample_size=32, patch_size=2, in_channels=4, num_layers=2, attention_head_dim=8, num_attention_heads=2,
        joint_attention_dim=t5_width, caption_projection_dim=16, pooled_projection_dim=2 * clip_width,
        out_channels=4, pos_embed_max_size=32, dual_attention_layers=(0,), qk_norm="rms_norm")
    # CLIP-L's activation is quick_gelu, OpenCLIP bigG's gelu (what a file of either is read with)
    clip_l, clip_g = (CLIPTextModelWithProjection(text_config(
        len(t), clip_width, projection_dim=clip_width, heads=clip_heads,
        hidden_act="gelu" if reference_heads and i == 1 else "quick_gelu")) for i, t in enumerate(tokenizers))
    pipe = StableDiffusion3Pipeline(
        transformer=transformer, scheduler=FlowMatchEulerDiscreteScheduler(shift=3.0),
        vae=tiny_shifted_vae(1.5305, 0.0609), text_encoder=clip_l, tokenizer=tokenizers[0], text_encoder_2=clip_g,
        tokenizer_2=tokenizers[1], text_encoder_3=T5EncoderModel(t5_config(len(tokenizer_3), t5_width)),
        tokenizer_3=tokenizer_3)
    pipe.save_pretrained(folder)
    return folder
