"""A tiny random-init Krea 2 pipeline (tests): two transformer blocks, a one-block text-fusion stage over the two
layers of a two-layer Qwen3-VL text encoder, a character-level tokenizer with Qwen's chat tokens, a four-channel
Qwen-Image autoencoder."""
from __future__ import annotations

from pathlib import Path

import torch

from trainers.models.qwen_image.tiny import LATENT_CHANNELS, tiny_qwen_vae
from trainers.models.qwen_image21.tiny import tiny_qwen3_vl
from trainers.models.zimage.tiny import write_tiny_qwen_tokenizer


def tiny_krea2_transformer() -> "torch.nn.Module":
    """Two blocks, a one-block text-fusion stage over two text layers of 32."""
    from diffusers import Krea2Transformer2DModel

    return Krea2Transformer2DModel(
        in_channels=LATENT_CHANNELS * 4, num_layers=2, attention_head_dim=16, num_attention_heads=2,
        num_key_value_heads=1, intermediate_size=64, timestep_embed_dim=32, text_hidden_dim=32, num_text_layers=2,
        text_num_attention_heads=2, text_num_key_value_heads=2, text_intermediate_size=64,
        num_layerwise_text_blocks=1, num_refiner_text_blocks=1, axes_dims_rope=(4, 6, 6))


def build_tiny_krea2(folder: Path, seed: int = 0, distilled: bool = False) -> Path:
    """Save a tiny Krea2Pipeline to `folder` (Krea 2 Raw's, or with `distilled` Krea 2 Turbo's is_distilled)."""
    from diffusers import FlowMatchEulerDiscreteScheduler, Krea2Pipeline
    from transformers import AutoTokenizer

    from trainers.models.krea2.family import KREA2

    torch.manual_seed(seed)
    write_tiny_qwen_tokenizer(folder / "tokenizer")
    tokenizer = AutoTokenizer.from_pretrained(folder / "tokenizer")
    text_encoder = tiny_qwen3_vl(len(tokenizer), tokenizer.pad_token_id).model  # Qwen3VLModel: two layers of 32
    transformer = tiny_krea2_transformer()
    pipe = Krea2Pipeline(scheduler=FlowMatchEulerDiscreteScheduler(**KREA2.scheduler_config()), vae=tiny_qwen_vae(),
                         text_encoder=text_encoder, tokenizer=tokenizer, transformer=transformer,
                         text_encoder_select_layers=(1, 2), is_distilled=distilled)
    pipe.save_pretrained(folder)
    return folder
