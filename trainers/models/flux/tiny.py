"""A tiny random-init FLUX.1-dev-structured pipeline (tests): one double and one single block, guidance embedding."""
from __future__ import annotations

from pathlib import Path

import torch

from trainers.models.tiny import text_config, write_tiny_tokenizer
from trainers.models.tiny_flow import t5_config, tiny_shifted_vae, write_tiny_t5_tokenizer


def build_tiny_flux(folder: Path, seed: int = 0, guidance_embeds: bool = True, reference_heads: bool = False,
                    blocks: tuple[int, int] = (1, 1), pipeline_class: str = "FluxPipeline") -> Path:
    """Save a tiny FLUX pipeline (CLIP-L and T5 text encoders) to `folder`; without `guidance_embeds`, schnell-like.
    `reference_heads`: attention heads as wide as the real models' (one 128-wide transformer head, 64-wide CLIP
    heads), whose configs can be read back from the weights alone, as for sd-scripts' separate files.
    `pipeline_class`: FluxKontextPipeline for a tiny FLUX.1 Kontext (the same modules)."""
    import diffusers
    from diffusers import FlowMatchEulerDiscreteScheduler, FluxTransformer2DModel
    from transformers import CLIPTextModel, CLIPTokenizer, T5EncoderModel, T5TokenizerFast

    torch.manual_seed(seed)
    write_tiny_tokenizer(folder / "tokenizer")
    write_tiny_t5_tokenizer(folder / "tokenizer_2")
    tokenizer = CLIPTokenizer.from_pretrained(folder / "tokenizer")
    tokenizer_2 = T5TokenizerFast.from_pretrained(folder / "tokenizer_2")
    head, heads, rope, clip_width, clip_heads = ((128, 1, (16, 56, 56), 64, 1) if reference_heads
                                                else (8, 2, (2, 2, 4), 32, 4))
    transformer = FluxTransformer2DModel(
        patch_size=1, in_channels=16, num_layers=blocks[0], num_single_layers=blocks[1], attention_head_dim=head,
        num_attention_heads=heads, joint_attention_dim=32, pooled_projection_dim=clip_width,
        guidance_embeds=guidance_embeds, axes_dims_rope=rope)
    scheduler = FlowMatchEulerDiscreteScheduler(
        shift=3.0, use_dynamic_shifting=guidance_embeds, base_shift=0.5, max_shift=1.15, base_image_seq_len=256,
        max_image_seq_len=4096)
    pipe = getattr(diffusers, pipeline_class)(
        scheduler=scheduler, vae=tiny_shifted_vae(0.3611, 0.1159),
        text_encoder=CLIPTextModel(text_config(len(tokenizer), clip_width, heads=clip_heads)), tokenizer=tokenizer,
        text_encoder_2=T5EncoderModel(t5_config(len(tokenizer_2), 32)), tokenizer_2=tokenizer_2,
        transformer=transformer)
    pipe.save_pretrained(folder)
    return folder

