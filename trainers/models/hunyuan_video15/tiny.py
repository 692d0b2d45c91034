"""A tiny random-init HunyuanVideo 1.5 text-to-video pipeline (tests) of the real diffusers classes: a two-block
HunyuanVideo15Transformer3DModel (its input the noisy latents, the condition latents and their mask: 2 x 8 + 1
channels), a causal AutoencoderKLHunyuanVideo15 (temporal compression 4, spatial 16, 8 latent channels; the
published 32), a three-layer Qwen2_5_VLTextModel with a character-level tokenizer carrying Qwen's chat tokens, a
ByT5 glyph encoder (T5EncoderModel, ByT5's byte tokenizer), the flow-matching scheduler and a guider; and its
image-to-video pipeline with a one-layer SigLIP image encoder."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from trainers.models.hunyuan_image21.tiny import GLYPH_WIDTH, tiny_byt5
from trainers.models.zimage.tiny import write_tiny_qwen_tokenizer

LATENT_CHANNELS = 8
TEXT_WIDTH = 32  # the tiny Qwen2.5-VL's hidden size
IMAGE_WIDTH = 16  # the tiny SigLIP states' width (text to video gives no image states)
# `published_heads`: one head of Qwen2.5-VL's published width (128, its rope sections and norm eps) and of SigLIP's
# (72), which single files are read with (head counts are not in the weights)
PUBLISHED_TEXT, PUBLISHED_IMAGE = 128, 72


def tiny_hunyuan_video15_vae() -> Any:
    """16x downsampling in space (four stages, as published) and 4x in time (the last two), few channels."""
    from diffusers import AutoencoderKLHunyuanVideo15

    return AutoencoderKLHunyuanVideo15(latent_channels=LATENT_CHANNELS, block_out_channels=(16,) * 5,
                                       layers_per_block=1, spatial_compression_ratio=16,
                                       temporal_compression_ratio=4, scaling_factor=1.03682)


def tiny_qwen25_vl_text(vocab_size: int, pad_token_id: int, published_heads: bool = False) -> Any:
    """A Qwen2_5_VLTextModel (the pipeline's text_encoder class) with three layers: the pipeline reads the third-last
    hidden states."""
    from transformers import Qwen2_5_VLTextConfig, Qwen2_5_VLTextModel

    width, heads, rope, eps = (PUBLISHED_TEXT, 1, [16, 24, 24], 1e-6) if published_heads else (
        TEXT_WIDTH, 2, [2, 3, 3], 1e-5)
    return Qwen2_5_VLTextModel(Qwen2_5_VLTextConfig(
        vocab_size=vocab_size, hidden_size=width, intermediate_size=64, num_hidden_layers=3,
        num_attention_heads=heads, num_key_value_heads=heads, pad_token_id=pad_token_id, bos_token_id=None,
        eos_token_id=pad_token_id, rms_norm_eps=eps, rope_scaling={"type": "mrope", "mrope_section": rope}))


def tiny_hunyuan_video15_transformer(task_type: str = "t2v", published_heads: bool = False) -> Any:
    from diffusers import HunyuanVideo15Transformer3DModel

    text, image = (PUBLISHED_TEXT, PUBLISHED_IMAGE) if published_heads else (TEXT_WIDTH, IMAGE_WIDTH)
    return HunyuanVideo15Transformer3DModel(
        in_channels=2 * LATENT_CHANNELS + 1, out_channels=LATENT_CHANNELS, num_attention_heads=2,
        attention_head_dim=16, num_layers=2, num_refiner_layers=1, text_embed_dim=text,
        text_embed_2_dim=GLYPH_WIDTH, image_embed_dim=image, rope_axes_dim=(4, 6, 6), target_size=64,
        task_type=task_type)


def tiny_siglip(published_heads: bool = False) -> tuple[Any, Any]:
    """I2V's SigLIP vision model (one layer, 28-pixel images in 14-pixel patches: 4 states of IMAGE_WIDTH; the
    published so400m: 729 of 1152) and its image processor."""
    from transformers import SiglipImageProcessor, SiglipVisionConfig, SiglipVisionModel

    width, heads = (PUBLISHED_IMAGE, 1) if published_heads else (IMAGE_WIDTH, 2)
    model = SiglipVisionModel(SiglipVisionConfig(hidden_size=width, intermediate_size=32, num_hidden_layers=1,
                                                 num_attention_heads=heads, image_size=28, patch_size=14))
    return model, SiglipImageProcessor(size={"height": 28, "width": 28})


def build_tiny_hunyuan_video15(folder: Path, seed: int = 0, i2v: bool = False, published_heads: bool = False) -> Path:
    """Save a tiny HunyuanVideo15Pipeline to `folder` (`i2v`: a HunyuanVideo15ImageToVideoPipeline, its transformer's
    task_type i2v, with a SigLIP image encoder; `published_heads`: see PUBLISHED_TEXT)."""
    from diffusers import FlowMatchEulerDiscreteScheduler, HunyuanVideo15ImageToVideoPipeline, HunyuanVideo15Pipeline
    from diffusers.guiders import ClassifierFreeGuidance
    from transformers import AutoTokenizer, ByT5Tokenizer

    torch.manual_seed(seed)
    write_tiny_qwen_tokenizer(folder / "tokenizer")
    tokenizer = AutoTokenizer.from_pretrained(folder / "tokenizer")
    components = {"text_encoder": tiny_qwen25_vl_text(len(tokenizer), tokenizer.pad_token_id, published_heads),
                  "tokenizer": tokenizer,
                  "transformer": tiny_hunyuan_video15_transformer("i2v" if i2v else "t2v", published_heads),
                  "vae": tiny_hunyuan_video15_vae(), "scheduler": FlowMatchEulerDiscreteScheduler(shift=5.0),
                  "text_encoder_2": tiny_byt5(), "tokenizer_2": ByT5Tokenizer(),
                  "guider": ClassifierFreeGuidance(guidance_scale=6.0)}
    if i2v:
        image_encoder, feature_extractor = tiny_siglip(published_heads)
        pipe = HunyuanVideo15ImageToVideoPipeline(**components, image_encoder=image_encoder,
                                                  feature_extractor=feature_extractor)
    else:
        pipe = HunyuanVideo15Pipeline(**components)
    pipe.save_pretrained(folder)
    return folder
