"""A tiny random-init Chroma pipeline (tests): one double and one single block, a T5 text encoder."""
from __future__ import annotations

from pathlib import Path

import torch

from trainers.models.tiny_flow import t5_config, tiny_shifted_vae, write_tiny_t5_tokenizer


def build_tiny_chroma(folder: Path, seed: int = 0, reference_heads: bool = False) -> Path:
    """Save a tiny ChromaPipeline (ChromaTransformer2DModel, T5 text encoder, FLUX.1-like VAE) to `folder`.
    `reference_heads`: one attention head as wide as the real model's (128), whose config can be read back from the
    weights alone, as for a chroma-unlocked-*.safetensors file."""
    from diffusers import ChromaPipeline, ChromaTransformer2DModel, FlowMatchEulerDiscreteScheduler
    from transformers import T5EncoderModel, T5TokenizerFast

    torch.manual_seed(seed)
    write_tiny_t5_tokenizer(folder / "tokenizer")
    tokenizer = T5TokenizerFast.from_pretrained(folder / "tokenizer")
    head, heads, rope = (128, 1, (16, 56, 56)) if reference_heads else (8, 2, (2, 2, 4))
    transformer = ChromaTransformer2DModel(
        patch_size=1, in_channels=16, num_layers=1, num_single_layers=1, attention_head_dim=head,
        num_attention_heads=heads, joint_attention_dim=32, axes_dims_rope=rope, approximator_num_channels=16,
        approximator_hidden_dim=32, approximator_layers=1)
    scheduler = FlowMatchEulerDiscreteScheduler(shift=1.0, use_dynamic_shifting=True, base_shift=0.5, max_shift=1.15,
                                                base_image_seq_len=256, max_image_seq_len=4096)
    pipe = ChromaPipeline(scheduler=scheduler, vae=tiny_shifted_vae(0.3611, 0.1159),
                          text_encoder=T5EncoderModel(t5_config(len(tokenizer), 32)), tokenizer=tokenizer,
                          transformer=transformer)
    pipe.save_pretrained(folder)
    return folder
