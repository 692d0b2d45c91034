"""A tiny random-init Z-Image pipeline (tests): two main layers, a two-layer Qwen3 text encoder, a character-level
tokenizer with Qwen's chat tokens, FLUX.1's latent scaling."""
from __future__ import annotations

import string
from pathlib import Path

import torch

from trainers.models.tiny_flow import tiny_shifted_vae

SPECIAL = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")  # Qwen's pad, and its chat turns
# Qwen3's chat template as it renders a user turn and the generation prompt (thinking enabled: no think block)
CHAT = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def write_tiny_qwen_tokenizer(folder: Path) -> None:
    """A character-level tokenizer (each printable character one token) with Qwen's special tokens."""
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast

    vocab = {token: i for i, token in enumerate((*SPECIAL, *string.printable))}
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.BPE(vocab=vocab, merges=[])),
                                        pad_token=SPECIAL[0], eos_token=SPECIAL[2],
                                        additional_special_tokens=[SPECIAL[1]], padding_side="right")
    tokenizer.chat_template = CHAT
    tokenizer.save_pretrained(folder)


def build_tiny_zimage(folder: Path, seed: int = 0, turbo: bool = True) -> Path:
    """Save a tiny ZImagePipeline (ZImageTransformer2DModel, Qwen3 text encoder, 4-channel shifted VAE); its scheduler
    Z-Image Turbo's (shift 3), or without `turbo` Z-Image base's (shift 6)."""
    from diffusers import FlowMatchEulerDiscreteScheduler, ZImagePipeline, ZImageTransformer2DModel
    from transformers import AutoTokenizer, Qwen3Config, Qwen3Model

    torch.manual_seed(seed)
    write_tiny_qwen_tokenizer(folder / "tokenizer")
    tokenizer = AutoTokenizer.from_pretrained(folder / "tokenizer")
    transformer = ZImageTransformer2DModel(
        in_channels=4, dim=32, n_layers=2, n_refiner_layers=1, n_heads=2, n_kv_heads=2, cap_feat_dim=32,
        axes_dims=[4, 6, 6], axes_lens=[1024, 64, 64])  # captions up to 512 tokens, as the real one
    text_encoder = Qwen3Model(Qwen3Config(
        vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
        num_key_value_heads=2, head_dim=16, pad_token_id=tokenizer.pad_token_id,
        rope_theta=1000000.0))  # Qwen3-4B's, as the published config that single files are read with
    pipe = ZImagePipeline(scheduler=FlowMatchEulerDiscreteScheduler(shift=3.0 if turbo else 6.0), vae=tiny_shifted_vae(0.3611, 0.1159),
                          text_encoder=text_encoder, tokenizer=tokenizer, transformer=transformer)
    pipe.save_pretrained(folder)
    return folder
