"""Tiny random-init SD1.x and SDXL pipelines, built offline in seconds.

They have the same module structure as the real models (so LoRA key names, family
detection and loading follow the real code paths) with tiny widths. The demo preset
and the tests both use them.
"""
from __future__ import annotations

import json
from pathlib import Path

import torch

# Byte-level BPE needs a vocab with every byte symbol; with no merges the tokenizer is
# character-level, which is all a tiny model needs.
_SPECIAL = ["<|startoftext|>", "<|endoftext|>"]


def _bytes_to_unicode() -> list[str]:
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return [chr(c) for c in cs]


def write_tiny_tokenizer(folder: Path) -> None:
    """Write a character-level CLIP tokenizer (vocab.json, merges.txt) into `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    symbols = _bytes_to_unicode()
    vocab: dict[str, int] = {}
    for s in symbols + [s + "</w>" for s in symbols] + _SPECIAL:
        vocab.setdefault(s, len(vocab))
    (folder / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False), encoding="utf-8")
    (folder / "merges.txt").write_text("#version: 0.2\n", encoding="utf-8")
    config = {
        "model_max_length": 77,
        "bos_token": _SPECIAL[0],
        "eos_token": _SPECIAL[1],
        "unk_token": _SPECIAL[1],
        "pad_token": _SPECIAL[1],
        "tokenizer_class": "CLIPTokenizer",
    }
    (folder / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")


def _text_config(vocab_size: int, hidden: int, projection_dim: int | None = None):
    from transformers import CLIPTextConfig

    return CLIPTextConfig(
        vocab_size=vocab_size,
        hidden_size=hidden,
        intermediate_size=hidden * 2,
        num_attention_heads=4,
        num_hidden_layers=2,
        max_position_embeddings=77,
        projection_dim=projection_dim or hidden,
        bos_token_id=vocab_size - 2,
        eos_token_id=vocab_size - 1,
        pad_token_id=vocab_size - 1,
        hidden_act="quick_gelu",
    )


def _tiny_vae():
    from diffusers import AutoencoderKL

    return AutoencoderKL(
        block_out_channels=(32, 64),
        in_channels=3,
        out_channels=3,
        down_block_types=("DownEncoderBlock2D", "DownEncoderBlock2D"),
        up_block_types=("UpDecoderBlock2D", "UpDecoderBlock2D"),
        latent_channels=4,
        sample_size=64,
    )


def build_tiny_sd1(folder: Path, seed: int = 0, v_prediction: bool = False) -> Path:
    """Save a tiny SD1.x-structured diffusers pipeline to `folder` and return it."""
    from diffusers import DDIMScheduler, StableDiffusionPipeline, UNet2DConditionModel
    from transformers import CLIPTextModel, CLIPTokenizer

    torch.manual_seed(seed)
    tok_dir = folder / "tokenizer"
    write_tiny_tokenizer(tok_dir)
    tokenizer = CLIPTokenizer.from_pretrained(tok_dir)
    unet = UNet2DConditionModel(
        sample_size=32,
        block_out_channels=(32, 64),
        layers_per_block=2,
        down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"),
        up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"),
        cross_attention_dim=32,
        attention_head_dim=8,
        norm_num_groups=32,
    )
    text_encoder = CLIPTextModel(_text_config(len(tokenizer), 32))
    scheduler = DDIMScheduler(
        beta_start=0.00085, beta_end=0.012, beta_schedule="scaled_linear", clip_sample=False,
        set_alpha_to_one=False, steps_offset=1, prediction_type="v_prediction" if v_prediction else "epsilon",
    )
    pipe = StableDiffusionPipeline(
        unet=unet, vae=_tiny_vae(), text_encoder=text_encoder, tokenizer=tokenizer, scheduler=scheduler,
        safety_checker=None, feature_extractor=None, requires_safety_checker=False,
    )
    pipe.save_pretrained(folder)
    return folder


def build_tiny_sdxl(folder: Path, seed: int = 0) -> Path:
    """Save a tiny SDXL-structured diffusers pipeline (two text encoders) to `folder`."""
    from diffusers import EulerDiscreteScheduler, StableDiffusionXLPipeline, UNet2DConditionModel
    from transformers import CLIPTextModel, CLIPTextModelWithProjection, CLIPTokenizer

    torch.manual_seed(seed)
    for name in ("tokenizer", "tokenizer_2"):
        write_tiny_tokenizer(folder / name)
    tokenizer = CLIPTokenizer.from_pretrained(folder / "tokenizer")
    tokenizer_2 = CLIPTokenizer.from_pretrained(folder / "tokenizer_2")
    unet = UNet2DConditionModel(
        sample_size=32,
        block_out_channels=(32, 64),
        layers_per_block=2,
        down_block_types=("DownBlock2D", "CrossAttnDownBlock2D"),
        up_block_types=("CrossAttnUpBlock2D", "UpBlock2D"),
        transformer_layers_per_block=(1, 2),
        attention_head_dim=(2, 4),
        use_linear_projection=True,
        addition_embed_type="text_time",
        addition_time_embed_dim=8,
        projection_class_embeddings_input_dim=8 * 6 + 32,
        cross_attention_dim=64,
        norm_num_groups=32,
    )
    text_encoder = CLIPTextModel(_text_config(len(tokenizer), 32))
    text_encoder_2 = CLIPTextModelWithProjection(_text_config(len(tokenizer_2), 32, projection_dim=32))
    scheduler = EulerDiscreteScheduler(
        beta_start=0.00085, beta_end=0.012, beta_schedule="scaled_linear", steps_offset=1,
        timestep_spacing="leading",
    )
    pipe = StableDiffusionXLPipeline(
        unet=unet, vae=_tiny_vae(), text_encoder=text_encoder, text_encoder_2=text_encoder_2,
        tokenizer=tokenizer, tokenizer_2=tokenizer_2, scheduler=scheduler,
    )
    pipe.save_pretrained(folder)
    return folder
