"""The CLIP ViT-L / OpenCLIP tokenizer of single-file checkpoints (they carry none), built offline from CLIP's BPE file.

The vocabulary file is vendored beside this module (see README.md here for its origin and license).
"""
from __future__ import annotations

import functools
import gzip
from pathlib import Path
from typing import Any

from trainers.models.base import ModelLoadError
from trainers.models.components import read_json

BPE_FILE = Path(__file__).with_name("bpe_simple_vocab_16e6.txt.gz")
_SPECIAL = ("<|startoftext|>", "<|endoftext|>")


@functools.lru_cache(maxsize=1)
def clip_vocabulary() -> tuple[dict[str, int], tuple[tuple[str, str], ...]]:
    """CLIP's vocabulary and merges, ordered exactly as CLIP's SimpleTokenizer orders them.

    256 byte symbols, the same with `</w>`, one token per merge, then <|startoftext|> (49406)
    and <|endoftext|> (49407): 49408 tokens.
    """
    from trainers.models.tiny import bytes_to_unicode

    lines = gzip.decompress(BPE_FILE.read_bytes()).decode("utf-8").split("\n")
    merges = tuple(tuple(line.split()) for line in lines[1:49152 - 256 - 2 + 1])
    symbols = bytes_to_unicode()
    tokens = symbols + [s + "</w>" for s in symbols] + ["".join(m) for m in merges] + list(_SPECIAL)
    vocab = {token: i for i, token in enumerate(tokens)}
    if len(vocab) != 49408 or vocab[_SPECIAL[1]] != 49407:
        raise ModelLoadError(f"{BPE_FILE} is not CLIP's BPE vocabulary ({len(vocab)} tokens)")
    return vocab, merges  # type: ignore[return-value]


def clip_tokenizer(pad_token: str = "<|endoftext|>", model_max_length: int = 77) -> Any:
    """The CLIP ViT-L / OpenCLIP tokenizer (they share one vocabulary), built offline.

    SD1.x and SDXL's first tokenizer pad with <|endoftext|>; OpenCLIP (SD2.x, SDXL's second) with "!" (id 0).
    """
    from transformers import CLIPTokenizer

    vocab, merges = clip_vocabulary()
    return CLIPTokenizer(vocab=dict(vocab), merges=list(merges), pad_token=pad_token,
                         model_max_length=model_max_length)


def folder_tokenizer(folder: Path, subfolder: str) -> Any:
    """The folder's own tokenizer when it has its files (a diffusers folder), else one from the vendored BPE."""
    from transformers import CLIPTokenizer

    sub = folder / subfolder
    if (sub / "vocab.json").exists() or (sub / "tokenizer.json").exists():
        return CLIPTokenizer.from_pretrained(sub)
    cfg = read_json(sub / "tokenizer_config.json")
    return clip_tokenizer(cfg.get("pad_token", _SPECIAL[1]), cfg.get("model_max_length", 77))
