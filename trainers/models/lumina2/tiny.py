"""A tiny random-init Lumina Image 2.0 pipeline (tests): two main layers and one refiner each, a two-layer Gemma 2
text encoder, a character-level tokenizer, FLUX.1's latent scaling."""
from __future__ import annotations

from pathlib import Path

import torch

from trainers.models.tiny_flow import tiny_shifted_vae
from trainers.models.zimage.tiny import write_tiny_qwen_tokenizer


def build_tiny_lumina2(folder: Path, seed: int = 0) -> Path:
    """Save a tiny Lumina2Pipeline (Lumina2Transformer2DModel, Gemma 2 text encoder, 4-channel shifted VAE)."""
    from diffusers import FlowMatchEulerDiscreteScheduler, Lumina2Pipeline, Lumina2Transformer2DModel
    from transformers import AutoTokenizer, Gemma2Config, Gemma2Model

    torch.manual_seed(seed)
    write_tiny_qwen_tokenizer(folder / "tokenizer")  # any tokenizer with a pad token reads like Gemma's here
    tokenizer = AutoTokenizer.from_pretrained(folder / "tokenizer")
    # heads as the published models' in proportion (the rope's three equal axes; Gemma 2's 256-wide heads), so that
    # the configs single files are read with (transformer.json, text_encoder.json) hold for it
    transformer = Lumina2Transformer2DModel(
        sample_size=16, patch_size=2, in_channels=4, hidden_size=48, num_layers=2, num_refiner_layers=1,
        num_attention_heads=2, num_kv_heads=1, multiple_of=16, axes_dim_rope=(8, 8, 8), axes_lens=(300, 64, 64),
        cap_feat_dim=32)
    text_encoder = Gemma2Model(Gemma2Config(
        vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
        num_key_value_heads=1, head_dim=256, pad_token_id=tokenizer.pad_token_id, bos_token_id=None,
        eos_token_id=tokenizer.eos_token_id))
    pipe = Lumina2Pipeline(scheduler=FlowMatchEulerDiscreteScheduler(shift=6.0), vae=_vae_by_8(),
                           text_encoder=text_encoder, tokenizer=tokenizer, transformer=transformer)
    pipe.save_pretrained(folder)
    return folder


def _vae_by_8() -> "torch.nn.Module":
    """The tiny shifted VAE with four stages: Lumina2Pipeline takes every VAE for one that downsamples by 8. Its
    norms in FLUX.1's 32 groups, as an ae file is read."""
    from diffusers import AutoencoderKL

    return AutoencoderKL.from_config(tiny_shifted_vae(0.3611, 0.1159).config, block_out_channels=(32, 32, 32, 32),
                                     down_block_types=("DownEncoderBlock2D",) * 4,
                                     up_block_types=("UpDecoderBlock2D",) * 4)
