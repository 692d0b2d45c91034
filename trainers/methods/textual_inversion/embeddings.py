"""A new word in the model's text encoders: its tokens added to every tokenizer, one trained vector per token in
every CLIP text encoder, the other words' vectors kept as they were. Used by textual inversion, and by LoRA for
pivotal tuning (the word trained together with a LoRA).

File layouts (what A1111, Forge, ComfyUI and diffusers' load_textual_inversion read):
- an embedding file: SD1.x/2.x `{"emb_params": (vectors, dim)}`; SDXL `{"clip_l": ..., "clip_g": ...}` (sd-scripts');
- inside a LoRA file (A1111/Forge's bundled embeddings): `bundle_emb.<word>.string_to_param.*` (one encoder) or
  `bundle_emb.<word>.clip_l` / `.clip_g` (SDXL).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from trainers.core.errors import ConfigError, ConfigIssue
from trainers.models import LoadedModel
from trainers.train.method import StepHook

ENCODER_KEYS = ("clip_l", "clip_g")  # SDXL's two encoders, as sd-scripts and A1111 name them
SINGLE_KEY = "emb_params"  # one encoder (SD1.x/2.x), as sd-scripts names it
BUNDLE_SINGLE = "string_to_param.*"  # one encoder, inside a LoRA file (A1111's .pt layout)


@dataclass
class NewWord:
    word: str  # as prompts write it
    tokens: list[str]  # inside the encoders: word, word1, word2, ...
    embeddings: list[nn.Embedding]  # each text encoder's input embeddings, which hold the new rows
    first_ids: list[int]  # per encoder: the id of tokens[0]; the others follow it

    def vectors(self) -> list[Tensor]:
        """Per text encoder, the word's vectors (tokens, dim) as they are now."""
        return [e.weight[first:first + len(self.tokens)] for e, first in zip(self.embeddings, self.first_ids)]

    def start_from(self, vectors: list[Tensor]) -> None:
        """Set the word's vectors (per text encoder, (tokens, dim)); a ConfigError names `weights` when they do not
        fit."""
        for index, (current, given) in enumerate(zip(self.vectors(), vectors)):
            if given.shape != current.shape:
                raise ConfigError([ConfigIssue("weights", f"holds {given.shape[0]} vector(s) of width "
                                               f"{given.shape[1]} for text encoder {index + 1}; the word has "
                                               f"{current.shape[0]} of width {current.shape[1]} (set "
                                               "num_vectors_per_token to the file's count, and use an embedding of "
                                               "this kind of model)", "embedding")])
        with torch.no_grad():
            for embedding, first, given in zip(self.embeddings, self.first_ids, vectors):
                embedding.weight[first:first + len(self.tokens)] = given.to(embedding.weight)

    def parameters(self) -> list[nn.Parameter]:
        return [e.weight for e in self.embeddings]

    def embedding_file(self, dtype: torch.dtype) -> dict[str, Tensor]:
        """The tensors of a standalone embedding file."""
        vectors = [v.detach().to("cpu", dtype).contiguous() for v in self.vectors()]
        return {SINGLE_KEY: vectors[0]} if len(vectors) == 1 else dict(zip(ENCODER_KEYS, vectors))

    def bundled(self, dtype: torch.dtype) -> dict[str, Tensor]:
        """The tensors of this word inside a LoRA file."""
        keys = [BUNDLE_SINGLE] if len(self.embeddings) == 1 else list(ENCODER_KEYS)
        return {f"bundle_emb.{self.word}.{key}": value for key, value in zip(keys, self.embedding_file(dtype).values())}


def read_embedding_file(path: Path, encoders: int) -> list[Tensor]:
    """Per text encoder, the vectors (count, dim) of an embedding file: ours and sd-scripts' (`emb_params`;
    `clip_l` and `clip_g` for SDXL), A1111's .pt (`string_to_param`) and diffusers' learned_embeds (one tensor
    under the token's name). A ConfigError names `weights` when the file does not fit a model of `encoders`
    text encoders."""
    def bad(message: str) -> ConfigError:
        return ConfigError([ConfigIssue("weights", f"{path}: {message}", "embedding")])

    try:
        if path.suffix == ".safetensors":
            from safetensors.torch import load_file

            data: Any = load_file(str(path))
        else:
            data = torch.load(str(path), map_location="cpu", weights_only=True)
    except Exception as err:  # a damaged file or not an embedding: every reader has its own error type
        raise bad(f"cannot be read as an embedding file ({err})") from None
    if isinstance(data, dict) and isinstance(data.get("string_to_param"), dict):  # A1111's .pt
        data = data["string_to_param"]
    if not isinstance(data, dict):
        raise bad("is not an embedding file (a dict of tensors)")
    if encoders > 1:
        found = [data.get(key) for key in ENCODER_KEYS[:encoders]]
        if any(not isinstance(v, Tensor) for v in found):
            raise bad(f"holds {', '.join(map(str, data)) or 'nothing'}; an SDXL embedding has a clip_l and a clip_g "
                      "tensor (one per text encoder)")
    else:
        tensors = [v for v in data.values() if isinstance(v, Tensor)]
        if SINGLE_KEY in data or len(tensors) == 1:
            found = [data.get(SINGLE_KEY, tensors[0] if tensors else None)]
        else:
            raise bad("is not a one-text-encoder (SD1.x/2.x) embedding: it should hold one tensor (emb_params)")
    return [v[None] if v.ndim == 1 else v for v in found]


def add_word(model: LoadedModel, word: str, tokens: list[str], init_word: str, option: str = "token_string"
             ) -> NewWord:
    """Add the word's tokens to every tokenizer and a trainable float32 vector per token to every text encoder,
    initialised from `init_word`'s vectors (repeated or cut to the count); prompts then write the word once and
    the tokenizers read its tokens. A ConfigError names `option` when a tokenizer knows a token already."""
    not_clip = [type(t).__name__ for t in model.tokenizers if not type(t).__name__.startswith("CLIPTokenizer")]
    if not_clip:
        raise ConfigError([ConfigIssue("pretrained_model_name_or_path", "has a text encoder that is no CLIP "
                                       f"({', '.join(not_clip)}); new words are trained for SD1.x/2.x and SDXL "
                                       "models", "model")])
    embeddings, first_ids = [], []
    for index, (tokenizer, encoder) in enumerate(zip(model.tokenizers, model.text_encoders)):
        init_ids = tokenizer(init_word, add_special_tokens=False).input_ids if init_word.strip() else []
        if init_word.strip() and not init_ids:
            raise ConfigError([ConfigIssue("init_word", f"{init_word!r} has no tokens: give a word", "embedding")])
        known = [t for t in tokens if t in tokenizer.get_vocab()]
        if known or tokenizer.add_tokens(tokens) != len(tokens):
            raise ConfigError([ConfigIssue(option, f"{', '.join(map(repr, known or tokens))} is already a word of "
                                           f"the model's tokenizer {index + 1}: choose a made-up word, e.g. 'ohwx'",
                                           "embedding")])
        ids = tokenizer.convert_tokens_to_ids(tokens)
        encoder.resize_token_embeddings(len(tokenizer), mean_resizing=not init_ids)  # else init_word's vectors
        embedding = encoder.get_input_embeddings()
        embedding.weight = nn.Parameter(embedding.weight.detach().float(), requires_grad=True)  # trained in fp32
        if init_ids:
            with torch.no_grad():
                for i, token_id in enumerate(ids):
                    embedding.weight[token_id] = embedding.weight[init_ids[i % len(init_ids)]]
        embeddings.append(embedding)
        first_ids.append(ids[0])
        if len(tokens) > 1:
            model.tokenizers[index] = WordTokens(tokenizer, word, tokens)
    return NewWord(word, tokens, embeddings, first_ids)


class WordTokens:
    """A tokenizer that reads the word as all its tokens ('word' -> 'word word1 word2'), in captions and sample
    prompts alike (sd-scripts replaces the word in both the same way)."""

    def __init__(self, tokenizer: Any, word: str, tokens: list[str]) -> None:
        self.tokenizer = tokenizer
        self.pattern = re.compile(rf"(?<![\w]){re.escape(word)}(?![\w])")
        self.replacement = " ".join(tokens)

    def __call__(self, text: str | list[str], *args: Any, **kwargs: Any) -> Any:
        written = self.pattern.sub(self.replacement, text) if isinstance(text, str) else \
            [self.pattern.sub(self.replacement, t) for t in text]
        return self.tokenizer(written, *args, **kwargs)

    def __len__(self) -> int:
        return len(self.tokenizer)

    def __getattr__(self, name: str) -> Any:
        if name == "tokenizer":  # not set yet (unpickling): no recursion
            raise AttributeError(name)
        return getattr(self.tokenizer, name)


class KeepOtherWords(StepHook):
    """Only the new rows learn: after every optimizer step the other words' vectors are put back (weight decay and
    momentum would move them too), as sd-scripts does."""

    def __init__(self, word: NewWord) -> None:
        self.kept = [(e.weight, first, e.weight.detach()[:first].clone())
                     for e, first in zip(word.embeddings, word.first_ids)]

    def after_step(self, step: int) -> None:
        with torch.no_grad():
            for weight, first, original in self.kept:
                weight[:first] = original
