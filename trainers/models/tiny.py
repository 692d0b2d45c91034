"""Pieces of tiny random-init pipelines, built offline in seconds (each family's `tiny.py` assembles its own).

They have the same module structure as the real models (so LoRA key names, family
detection and loading follow the real code paths) with tiny widths. The demo preset
and the tests both use them.
"""
from __future__ import annotations

import json
from pathlib import Path

# Byte-level BPE needs a vocab with every byte symbol; with no merges the tokenizer is
# character-level, which is all a tiny model needs.
_SPECIAL = ["<|startoftext|>", "<|endoftext|>"]


def bytes_to_unicode() -> list[str]:
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
    symbols = bytes_to_unicode()
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


def text_config(vocab_size: int, hidden: int, projection_dim: int | None = None, heads: int = 4,
                hidden_act: str = "quick_gelu"):
    from transformers import CLIPTextConfig

    return CLIPTextConfig(
        vocab_size=vocab_size,
        hidden_size=hidden,
        intermediate_size=hidden * 2,
        num_attention_heads=heads,
        num_hidden_layers=2,
        max_position_embeddings=77,
        projection_dim=projection_dim or hidden,
        bos_token_id=vocab_size - 2,
        eos_token_id=vocab_size - 1,
        pad_token_id=vocab_size - 1,
        hidden_act=hidden_act,
    )


def tiny_vae(levels: int = 4):
    """A tiny AutoencoderKL; its latents are 2 ** (levels - 1) times smaller than the image on each side: 8 with
    the 4 levels of the published SD and SDXL VAEs (8x8 latents at 64 px)."""
    from diffusers import AutoencoderKL

    return AutoencoderKL(
        block_out_channels=(32,) + (64,) * (levels - 1),
        in_channels=3,
        out_channels=3,
        down_block_types=("DownEncoderBlock2D",) * levels,
        up_block_types=("UpDecoderBlock2D",) * levels,
        latent_channels=4,
        sample_size=64,
    )
