"""A tiny random-init HunyuanImage 2.1 folder (tests), in the published layout: a HunyuanImageTransformer2DModel with
one dual- and one single-stream block over unpatched latents (8 channels; the published 64), a three-layer
Qwen2.5-VL text encoder (character-level tokenizer with Qwen's chat tokens), a ByT5 glyph encoder (T5EncoderModel,
ByT5's byte tokenizer), an AutoencoderKLHunyuanImage that downsamples by 32, and the pipeline's model_index.json."""
from __future__ import annotations

from pathlib import Path

import torch

from trainers.models.zimage.tiny import write_tiny_qwen_tokenizer

LATENT_CHANNELS = 8
TEXT_WIDTH = 32  # the tiny Qwen2.5-VL's hidden size
GLYPH_WIDTH = 24  # the tiny ByT5's d_model (the published one's 1472 is narrower than Qwen2.5-VL's 3584 too)


def tiny_hunyuan_transformer(guidance_embeds: bool = False, use_meanflow: bool = False) -> "torch.nn.Module":
    """The published layout (patch 1x1, two rope axes, a ByT5 projection) at tiny sizes; the flags: the distilled
    variant's guidance embedding and MeanFlow timestep."""
    from diffusers import HunyuanImageTransformer2DModel

    return HunyuanImageTransformer2DModel(
        in_channels=LATENT_CHANNELS, out_channels=LATENT_CHANNELS, num_attention_heads=2, attention_head_dim=16,
        num_layers=1, num_single_layers=1, num_refiner_layers=1, patch_size=(1, 1), text_embed_dim=TEXT_WIDTH,
        text_embed_2_dim=GLYPH_WIDTH, rope_axes_dim=(8, 8), guidance_embeds=guidance_embeds,
        use_meanflow=use_meanflow)


def tiny_hunyuan_vae() -> "torch.nn.Module":
    """32x downsampling (six stages, as published) with few channels (its group norms take 32 groups)."""
    from diffusers import AutoencoderKLHunyuanImage

    return AutoencoderKLHunyuanImage(in_channels=3, out_channels=3, latent_channels=LATENT_CHANNELS,
                                     block_out_channels=(32,) * 6, layers_per_block=1,
                                     spatial_compression_ratio=32, sample_size=64, scaling_factor=0.75289)


def tiny_byt5() -> "torch.nn.Module":
    from transformers import T5Config, T5EncoderModel

    return T5EncoderModel(T5Config(vocab_size=384, d_model=GLYPH_WIDTH, d_kv=8, d_ff=48, num_layers=1, num_heads=2,
                                   feed_forward_proj="gated-gelu", relative_attention_num_buckets=8,
                                   tie_word_embeddings=False, pad_token_id=0, eos_token_id=1))


def tiny_qwen25_vl(vocab_size: int, pad_token_id: int) -> "torch.nn.Module":
    """Qwen-Image's tiny Qwen2.5-VL with three layers (the pipeline reads the third-last hidden states)."""
    from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration

    text = {"vocab_size": vocab_size, "hidden_size": TEXT_WIDTH, "intermediate_size": 64, "num_hidden_layers": 3,
            "num_attention_heads": 2, "num_key_value_heads": 2, "pad_token_id": pad_token_id, "bos_token_id": None,
            "eos_token_id": pad_token_id, "rope_scaling": {"type": "mrope", "mrope_section": [2, 3, 3]}}
    vision = {"depth": 1, "hidden_size": 16, "intermediate_size": 32, "num_heads": 2, "out_hidden_size": TEXT_WIDTH,
              "fullatt_block_indexes": [0]}
    return Qwen2_5_VLForConditionalGeneration(Qwen2_5_VLConfig(text_config=text, vision_config=vision))


def build_tiny_hunyuan_image21(folder: Path, seed: int = 0, guidance_embeds: bool = False,
                               use_meanflow: bool = False) -> Path:
    """Save a tiny HunyuanImagePipeline to `folder` (no guider: samples are rendered with classifier-free guidance
    of the run's scale)."""
    from diffusers import FlowMatchEulerDiscreteScheduler, HunyuanImagePipeline
    from transformers import AutoTokenizer, ByT5Tokenizer

    from trainers.models.hunyuan_image21.family import HUNYUAN_IMAGE21

    torch.manual_seed(seed)
    write_tiny_qwen_tokenizer(folder / "tokenizer")
    tokenizer = AutoTokenizer.from_pretrained(folder / "tokenizer")
    text_encoder = tiny_qwen25_vl(len(tokenizer), tokenizer.pad_token_id)
    pipe = HunyuanImagePipeline(
        scheduler=FlowMatchEulerDiscreteScheduler(**HUNYUAN_IMAGE21.scheduler_config()), vae=tiny_hunyuan_vae(),
        text_encoder=text_encoder, tokenizer=tokenizer, text_encoder_2=tiny_byt5(), tokenizer_2=ByT5Tokenizer(),
        transformer=tiny_hunyuan_transformer(guidance_embeds, use_meanflow))
    pipe.save_pretrained(folder)
    return folder
