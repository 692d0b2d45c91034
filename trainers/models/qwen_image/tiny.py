"""A tiny random-init Qwen-Image pipeline (tests): two transformer blocks, a two-layer Qwen2.5-VL text encoder with a
one-block vision tower, a character-level tokenizer with Qwen's chat tokens, a four-channel Qwen-Image VAE."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from trainers.models.zimage.tiny import write_tiny_qwen_tokenizer

LATENT_CHANNELS = 4


def tiny_qwen_vae() -> "torch.nn.Module":
    """An AutoencoderKLQwenImage that downsamples by 8 (three stages) with per-channel latent statistics."""
    from diffusers import AutoencoderKLQwenImage

    return AutoencoderKLQwenImage(base_dim=8, z_dim=LATENT_CHANNELS, dim_mult=[1, 1, 1, 1], num_res_blocks=1,
                                  attn_scales=[], temperal_downsample=[False, False, False],
                                  latents_mean=[0.1, -0.2, 0.05, 0.0], latents_std=[1.5, 2.0, 0.8, 1.2])


def tiny_qwen_vl(vocab_size: int, pad_token_id: int, **token_ids: int) -> "torch.nn.Module":
    """`token_ids`: the vision tokens' ids (image_token_id, vision_start_token_id, ...) of a tokenizer that has them."""
    from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration

    text = {"vocab_size": vocab_size, "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
            "num_attention_heads": 2, "num_key_value_heads": 2, "pad_token_id": pad_token_id, "bos_token_id": None,
            "eos_token_id": pad_token_id,
            "rope_scaling": {"type": "mrope", "mrope_section": [2, 3, 3]}}
    vision = {"depth": 1, "hidden_size": 16, "intermediate_size": 32, "num_heads": 2, "out_hidden_size": 32,
              "fullatt_block_indexes": [0]}
    return Qwen2_5_VLForConditionalGeneration(Qwen2_5_VLConfig(text_config=text, vision_config=vision, **token_ids))


def tiny_qwen_denoiser() -> tuple["torch.nn.Module", Any]:
    """(a two-block QwenImageTransformer2DModel, Qwen-Image's published sampling schedule)."""
    from diffusers import FlowMatchEulerDiscreteScheduler, QwenImageTransformer2DModel

    transformer = QwenImageTransformer2DModel(
        patch_size=2, in_channels=LATENT_CHANNELS * 4, out_channels=LATENT_CHANNELS, num_layers=2,
        attention_head_dim=16, num_attention_heads=2, joint_attention_dim=32, axes_dims_rope=(4, 6, 6))
    scheduler = FlowMatchEulerDiscreteScheduler(
        shift=1.0, use_dynamic_shifting=True, base_shift=0.5, max_shift=0.9, base_image_seq_len=256,
        max_image_seq_len=8192, shift_terminal=0.02, time_shift_type="exponential")
    return transformer, scheduler


def build_tiny_qwen_image(folder: Path, seed: int = 0) -> Path:
    """Save a tiny QwenImagePipeline to `folder`."""
    from diffusers import QwenImagePipeline
    from transformers import AutoTokenizer

    torch.manual_seed(seed)
    write_tiny_qwen_tokenizer(folder / "tokenizer")
    tokenizer = AutoTokenizer.from_pretrained(folder / "tokenizer")
    transformer, scheduler = tiny_qwen_denoiser()
    pipe = QwenImagePipeline(scheduler=scheduler, vae=tiny_qwen_vae(),
                             text_encoder=tiny_qwen_vl(len(tokenizer), tokenizer.pad_token_id), tokenizer=tokenizer,
                             transformer=transformer)
    pipe.save_pretrained(folder)
    return folder
