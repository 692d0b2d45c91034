"""A tiny random-init Qwen-Image pipeline (tests): two transformer blocks, a two-layer Qwen2.5-VL text encoder with a
one-block vision tower, a character-level tokenizer with Qwen's chat tokens, a four-channel Qwen-Image VAE."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from trainers.models.qwen_image.parts import VAE_CONFIG
from trainers.models.zimage.tiny import write_tiny_qwen_tokenizer

LATENT_CHANNELS = 4


def tiny_qwen_vae(published_latents: bool = False) -> "torch.nn.Module":
    """An AutoencoderKLQwenImage that downsamples by 8 (three stages) with per-channel latent statistics
    (`published_latents`: Qwen-Image's 16 channels, statistics and blocks, which its single files are read with)."""
    from diffusers import AutoencoderKLQwenImage

    layout: dict[str, Any] = {"z_dim": LATENT_CHANNELS, "latents_mean": [0.1, -0.2, 0.05, 0.0],
                              "latents_std": [1.5, 2.0, 0.8, 1.2], "temperal_downsample": [False, False, False],
                              "num_res_blocks": 1, "dim_mult": [1, 1, 1, 1], "attn_scales": []}
    if published_latents:  # and the published blocks, which diffusers' converter of Wan-layout files assumes
        layout = {k: v for k, v in json.loads(VAE_CONFIG.read_text(encoding="utf-8")).items() if k in layout}
    return AutoencoderKLQwenImage(base_dim=8, **layout)


def tiny_qwen_vl(vocab_size: int, pad_token_id: int, published_heads: bool = False,
                 **token_ids: int) -> "torch.nn.Module":
    """`token_ids`: the vision tokens' ids (image_token_id, vision_start_token_id, ...) of a tokenizer that has them.
    `published_heads`: one head as wide as Qwen2.5-VL's (128; the vision tower's 80), which single files are read
    with (the head count is not in the weights)."""
    from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration

    width, heads, rope, vision_width = (128, 1, [16, 24, 24], 80) if published_heads else (32, 2, [2, 3, 3], 16)
    text = {"vocab_size": vocab_size, "hidden_size": width, "intermediate_size": 64, "num_hidden_layers": 2,
            "num_attention_heads": heads, "num_key_value_heads": heads, "pad_token_id": pad_token_id,
            "bos_token_id": None, "eos_token_id": pad_token_id,
            "rope_scaling": {"type": "mrope", "mrope_section": rope}, "rms_norm_eps": 1e-6 if published_heads else 1e-5}
    vision = {"depth": 1, "hidden_size": vision_width, "intermediate_size": 32, "num_heads": heads,
              "out_hidden_size": width, "fullatt_block_indexes": [] if published_heads else [0]}
    return Qwen2_5_VLForConditionalGeneration(Qwen2_5_VLConfig(text_config=text, vision_config=vision, **token_ids))


def tiny_qwen_denoiser(reference_sizes: bool = False, blocks: int = 2) -> tuple["torch.nn.Module", Any]:
    """(a QwenImageTransformer2DModel of `blocks` blocks, Qwen-Image's published sampling schedule). `reference_sizes`: one
    head as wide as the real model's (128, rope axes as published) over 16 latent channels and a text encoder with
    published heads (tiny_qwen_vl), so that its config can be read back from the weights."""
    from diffusers import FlowMatchEulerDiscreteScheduler, QwenImageTransformer2DModel

    channels, head, heads, text, rope = (16, 128, 1, 128, (16, 56, 56)) if reference_sizes else (
        LATENT_CHANNELS, 16, 2, 32, (4, 6, 6))
    transformer = QwenImageTransformer2DModel(
        patch_size=2, in_channels=channels * 4, out_channels=channels, num_layers=blocks, attention_head_dim=head,
        num_attention_heads=heads, joint_attention_dim=text, axes_dims_rope=rope)
    scheduler = FlowMatchEulerDiscreteScheduler(
        shift=1.0, use_dynamic_shifting=True, base_shift=0.5, max_shift=0.9, base_image_seq_len=256,
        max_image_seq_len=8192, shift_terminal=0.02, time_shift_type="exponential")
    return transformer, scheduler


def build_tiny_qwen_image(folder: Path, seed: int = 0, reference_sizes: bool = False, blocks: int = 2) -> Path:
    """Save a tiny QwenImagePipeline to `folder` (`reference_sizes`: readable back from its split single files, as
    tiny_qwen_denoiser says; `blocks`: its transformer's)."""
    from diffusers import QwenImagePipeline
    from transformers import AutoTokenizer

    torch.manual_seed(seed)
    write_tiny_qwen_tokenizer(folder / "tokenizer")
    tokenizer = AutoTokenizer.from_pretrained(folder / "tokenizer")
    transformer, scheduler = tiny_qwen_denoiser(reference_sizes, blocks)
    pipe = QwenImagePipeline(scheduler=scheduler, vae=tiny_qwen_vae(reference_sizes),
                             text_encoder=tiny_qwen_vl(len(tokenizer), tokenizer.pad_token_id, reference_sizes),
                             tokenizer=tokenizer, transformer=transformer)
    pipe.save_pretrained(folder)
    return folder
