"""A tiny random-init Ideogram 4 pipeline (tests): Ideogram4Transformer2DModel with two blocks as the conditional and
the unconditional transformer, a 36-layer Qwen3VLModel text encoder 16 wide (the pipeline taps its layers 0, 3, ...,
33, 35: 13 x 16 text features), a character-level tokenizer with Qwen's chat tokens and a chat template that reads
Qwen3-VL's content lists, and FLUX.2's AutoencoderKLFlux2 with the published 32 latent channels (128 per 2x2 patch)
and batch-norm statistics that are not the identity."""
from __future__ import annotations

from pathlib import Path

import torch

from trainers.models.flux2.tiny import tiny_flux2_vae
from trainers.models.zimage.tiny import write_tiny_qwen_tokenizer

LATENT_CHANNELS = 32  # the published VAE's (FLUX.2's)
TEXT_WIDTH = 16
TEXT_LAYERS = 36  # Qwen3-VL 8B's
TAPS = 13  # QWEN3_VL_ACTIVATION_LAYERS
# Qwen3-VL's chat template as it renders a user turn whose content is a list of text parts, and the generation prompt
CHAT = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{% if m['content'] is string %}{{ m['content'] }}"
        "{% else %}{% for c in m['content'] %}{{ c['text'] }}{% endfor %}{% endif %}<|im_end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def write_tiny_ideogram4_tokenizer(folder: Path) -> None:
    from transformers import AutoTokenizer

    write_tiny_qwen_tokenizer(folder)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    tokenizer.chat_template = CHAT
    tokenizer.save_pretrained(folder)


def tiny_ideogram4_vae() -> "torch.nn.Module":
    return tiny_flux2_vae(LATENT_CHANNELS)


def tiny_ideogram4_transformer(published_heads: bool = False) -> "torch.nn.Module":
    """Two blocks 32 wide (2 heads of 16; MRoPE's (t, h, w) sections over its 8 frequencies), or with
    `published_heads` one head of the published 256 and its rope sections (which a single file does not hold)."""
    from diffusers import Ideogram4Transformer2DModel

    heads = {"attention_head_dim": 256, "num_attention_heads": 1, "mrope_section": (24, 20, 20)} if published_heads \
        else {"attention_head_dim": 16, "num_attention_heads": 2, "mrope_section": (4, 2, 2)}
    return Ideogram4Transformer2DModel(in_channels=LATENT_CHANNELS * 4, num_layers=2, intermediate_size=64,
                                       adaln_dim=16, llm_features_dim=TAPS * TEXT_WIDTH, rope_theta=5_000_000,
                                       **heads)


def tiny_qwen3_vl_model(vocab_size: int, pad_token_id: int) -> "torch.nn.Module":
    """A Qwen3VLModel (the pipeline's text encoder: no LM head) of 36 layers 16 wide, a one-block vision tower."""
    from transformers import Qwen3VLConfig, Qwen3VLModel

    text = {"vocab_size": vocab_size, "hidden_size": TEXT_WIDTH, "intermediate_size": 32,
            "num_hidden_layers": TEXT_LAYERS, "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 8,
            "pad_token_id": pad_token_id,
            "rope_scaling": {"rope_type": "default", "rope_theta": 5_000_000, "mrope_section": [2, 1, 1],
                             "mrope_interleaved": True}}  # the published theta
    vision = {"depth": 1, "hidden_size": 16, "intermediate_size": 32, "num_heads": 2, "out_hidden_size": TEXT_WIDTH,
              "deepstack_visual_indexes": []}
    return Qwen3VLModel(Qwen3VLConfig(text_config=text, vision_config=vision))


def build_tiny_ideogram4(folder: Path, seed: int = 0, published_widths: bool = False) -> Path:
    """Save a tiny Ideogram4Pipeline to `folder` (its two transformers of different random weights); `published_widths`:
    the transformers' heads and the autoencoder's norm groups as published (single files do not hold them)."""
    from trainers.models.ernie_image.tiny import with_published_groups

    from diffusers import FlowMatchEulerDiscreteScheduler, Ideogram4Pipeline
    from transformers import AutoTokenizer

    torch.manual_seed(seed)
    write_tiny_ideogram4_tokenizer(folder / "tokenizer")
    tokenizer = AutoTokenizer.from_pretrained(folder / "tokenizer")
    vae = with_published_groups(tiny_ideogram4_vae()) if published_widths else tiny_ideogram4_vae()
    pipe = Ideogram4Pipeline(scheduler=FlowMatchEulerDiscreteScheduler(), vae=vae,
                             text_encoder=tiny_qwen3_vl_model(len(tokenizer), tokenizer.pad_token_id),
                             tokenizer=tokenizer, transformer=tiny_ideogram4_transformer(published_widths),
                             unconditional_transformer=tiny_ideogram4_transformer(published_widths))
    pipe.save_pretrained(folder)
    return folder
