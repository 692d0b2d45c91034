"""Words bundled in a LoRA file (pivotal tuning: `bundle_emb.<word>.*`, as A1111 and Forge read them): their
vectors go into the text encoders under private tokens, and prompts read the word as those tokens only while the
LoRA is in use, so a variant without it (the base of a compare grid) encodes the word as the base model does.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from trainers.methods.textual_inversion.embeddings import BUNDLE_SINGLE, ENCODER_KEYS, SINGLE_KEY, WordTokens
from trainers.models import LoadedModel

PREFIX = "bundle_emb."
ENCODER_OF = {BUNDLE_SINGLE: 0, SINGLE_KEY: 0, ENCODER_KEYS[0]: 0, ENCODER_KEYS[1]: 1}


@dataclass(frozen=True)
class BundledWord:
    word: str  # as prompts write it
    tokens: tuple[str, ...]  # the private tokens it stands for, one per vector


def split_bundled(state: dict[str, Tensor]) -> tuple[dict[str, Tensor], dict[str, dict[int, Tensor]]]:
    """The LoRA's own tensors, and each bundled word's vectors by text-encoder index."""
    lora, words = {}, {}
    for key, value in state.items():
        if not key.startswith(PREFIX):
            lora[key] = value
            continue
        rest = key[len(PREFIX):]
        suffix = next((s for s in ENCODER_OF if rest.endswith("." + s)), None)
        if suffix is None:
            raise ValueError(f"bundled embedding {key!r} is neither {BUNDLE_SINGLE!r} nor one of {ENCODER_KEYS}")
        words.setdefault(rest[:-len(suffix) - 1], {})[ENCODER_OF[suffix]] = value
    return lora, words


def install_words(model: LoadedModel, words: dict[str, dict[int, Tensor]], tag: str) -> list[BundledWord]:
    """Add each word's vectors to the text encoders under tokens private to `tag` (one LoRA file)."""
    installed = []
    for word_index, (word, vectors) in enumerate(sorted(words.items())):
        count = {len(v) for v in vectors.values()}
        if len(count) != 1 or set(vectors) != set(range(len(model.text_encoders))):
            raise ValueError(f"bundled word {word!r} has vectors for text encoders {sorted(vectors)} "
                             f"({sorted(count)} tokens), the model has {len(model.text_encoders)} text encoders")
        tokens = tuple(f"<{tag}-{word_index}-{i}>" for i in range(count.pop()))
        for index, tokenizer in enumerate(model.tokenizers):
            if tokenizer.add_tokens(list(tokens)) != len(tokens):
                raise ValueError(f"bundled word {word!r}: its tokens are taken in tokenizer {index + 1}")
            encoder = model.text_encoders[index]
            encoder.resize_token_embeddings(len(tokenizer), mean_resizing=False)
            weight = encoder.get_input_embeddings().weight
            if vectors[index].shape[-1] != weight.shape[-1]:
                raise ValueError(f"bundled word {word!r}: vectors of width {vectors[index].shape[-1]} for a text "
                                 f"encoder of width {weight.shape[-1]} (a LoRA of another model)")
            with torch.no_grad():
                weight[tokenizer.convert_tokens_to_ids(list(tokens))] = vectors[index].to(weight)
        installed.append(BundledWord(word, tokens))
    return installed


def reading_words(tokenizers: list[Any], words: list[BundledWord]) -> list[Any]:
    """The tokenizers that read each word as its tokens (the words of the LoRAs in use)."""
    wrapped = list(tokenizers)
    for word in words:
        wrapped = [WordTokens(t, word.word, list(word.tokens)) for t in wrapped]
    return wrapped
