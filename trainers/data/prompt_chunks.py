"""Long prompts as sd-scripts encodes them (max_token_length 150 or 225): CLIP reads 75 tokens at a time.

A prompt of up to `chunks` x 75 tokens is tokenized as one sequence (BOS, tokens, EOS, padding), cut into
75-token chunks and each chunk is wrapped in the sequence's BOS and last token (EOS, or padding for a
tokenizer whose padding is not EOS, e.g. SD2's and SDXL's second). For those, a chunk the text runs through
ends in EOS, and an empty chunk starts with one, as sd-scripts' `_get_input_ids` does. The ids of one prompt
are the chunks side by side: (chunks x 77,). The text encoder runs on each chunk; the hidden states are
put back together as the first BOS, every chunk's 75 token states and the last chunk's final state
(chunks x 75 + 2 positions), as sd-scripts' `encode_tokens` does (models/prompt_states.py).

With weighted captions, `(word:1.2)`-style emphasis (prompt_weights.py) gives each token a weight that
multiplies its hidden state, without renormalizing (sd-scripts' `encode_tokens_with_weights`).
"""
from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from trainers.data.prompt_weights import parse_weights

CHUNK = 75  # tokens a chunk holds between its BOS and EOS
LENGTHS = (75, 150, 225)  # max_token_length values sd-scripts accepts (75 = unset)


class PromptTruncated(UserWarning):
    """A prompt had more tokens than max_token_length: the rest was cut."""


@dataclass(frozen=True)
class PromptFormat:
    """How prompts are tokenized: max_token_length (None = 75) and whether emphasis syntax is weighted.

    `fit`: a batch takes only as many chunks as its longest prompt needs (up to max_token_length), as A1111
    and sd-scripts' sample pipeline do; training always uses max_token_length's chunks, as sd-scripts does.
    """

    max_token_length: int | None = None
    weighted: bool = False
    fit: bool = False

    @property
    def chunks(self) -> int:
        return max(1, (self.max_token_length or CHUNK) // CHUNK)

    @property
    def limit(self) -> int:
        """Tokens a prompt may have (without BOS and EOS)."""
        return self.chunks * CHUNK


@dataclass
class WeightedIds:
    """Token ids with the weight of each token (weighted captions), batched like the ids they go with.

    It stands in a batch's `input_ids` for a plain ids tensor: the data loader's collate stacks it, accelerate's
    device placement and the training step move it with `.to`, and the text encoding takes it apart again
    (`split_weighted`), so the weights reach the text encoders by the same road as the ids."""

    ids: torch.Tensor
    weights: torch.Tensor

    def __getitem__(self, index: Any) -> "WeightedIds":
        return WeightedIds(self.ids[index], self.weights[index])

    def to(self, device: Any, non_blocking: bool = False) -> "WeightedIds":
        return WeightedIds(self.ids.to(device, non_blocking=non_blocking),
                           self.weights.to(device, non_blocking=non_blocking))

    @staticmethod
    def stack(items: Sequence["WeightedIds"]) -> "WeightedIds":
        return WeightedIds(torch.stack([i.ids for i in items]), torch.stack([i.weights for i in items]))


def split_weighted(input_ids: Sequence[Any]) -> tuple[list[torch.Tensor], list[torch.Tensor] | None]:
    """(ids, weights or None) of a batch's per-tokenizer entries, plain tensors or WeightedIds."""
    if input_ids and isinstance(input_ids[0], WeightedIds):
        return [i.ids for i in input_ids], [i.weights for i in input_ids]
    return list(input_ids), None


def token_ids(tokenizer: Any, texts: list[str], fmt: PromptFormat) -> tuple[torch.Tensor, torch.Tensor]:
    """(ids, weights), each (len(texts), chunks x 77); the weights are all 1 unless `fmt.weighted`."""
    if fmt.weighted:
        bodies = [_weighted_body(tokenizer, text) for text in texts]
    else:
        bodies = [(ids, [1.0] * len(ids)) for ids in _bodies(tokenizer, texts)]
    chunks = fmt.chunks
    if fmt.fit:
        longest = max((len(body) for body, _ in bodies), default=0)
        chunks = min(chunks, max(1, -(-longest // CHUNK)))
    rows, weight_rows = [], []
    for text, (body, weights) in zip(texts, bodies):
        if len(body) > fmt.limit:
            warnings.warn(PromptTruncated(truncation_message(text, len(body), fmt.limit)), stacklevel=3)
            body, weights = body[:fmt.limit], weights[:fmt.limit]
        ids, w = _chunked(tokenizer, body, weights, chunks)
        rows.append(ids)
        weight_rows.append(w)
    return torch.tensor(rows, dtype=torch.long), torch.tensor(weight_rows, dtype=torch.float32)


def truncation_message(text: str, tokens: int, limit: int) -> str:
    preview = text if len(text) <= 100 else text[:100] + "..."
    more = " (or set max_token_length to 150 or 225)" if limit < LENGTHS[-1] else ""
    return (f"a prompt has {tokens} tokens, more than the {limit} max_token_length allows; the rest is cut: "
            f"shorten it{more}: {preview!r}")


def token_counts(tokenizer: Any, texts: list[str], weighted: bool = False) -> list[int]:
    """Tokens of each text without BOS/EOS (of the text without its emphasis syntax when `weighted`)."""
    if weighted:
        return [len(_weighted_body(tokenizer, text)[0]) for text in texts]
    return [len(ids) for ids in _bodies(tokenizer, texts)]


def _bodies(tokenizer: Any, texts: list[str]) -> list[list[int]]:
    if not texts:
        return []
    return tokenizer(list(texts), add_special_tokens=False, verbose=False).input_ids


def _weighted_body(tokenizer: Any, text: str) -> tuple[list[int], list[float]]:
    """Each emphasis piece tokenized alone (as sd-scripts does), its weight repeated over its tokens."""
    body: list[int] = []
    weights: list[float] = []
    for piece, weight in parse_weights(text):
        ids = _bodies(tokenizer, [piece])[0] if piece else []
        body += ids
        weights += [weight] * len(ids)
    return body, weights


def _chunked(tokenizer: Any, body: list[int], weights: list[float], chunks: int) -> tuple[list[int], list[float]]:
    """One prompt's ids as `chunks` sequences of BOS + 75 tokens + EOS/padding, side by side."""
    bos, eos, pad = tokenizer.bos_token_id, tokenizer.eos_token_id, tokenizer.pad_token_id
    size = chunks * CHUNK
    full = [bos] + body + [eos] + [pad] * (size - len(body))
    full_weights = [1.0] + weights + [1.0] * (size + 1 - len(weights))
    ids: list[int] = []
    out_weights: list[float] = []
    for k in range(chunks):
        start = 1 + k * CHUNK
        part = [full[0]] + full[start:start + CHUNK] + [full[-1]]
        if pad != eos:
            if part[-2] not in (eos, pad):  # the text runs through this chunk: close it
                part[-1] = eos
            if part[1] == pad:  # an empty chunk: BOS EOS padding
                part[1] = eos
        ids += part
        out_weights += [1.0] + full_weights[start:start + CHUNK] + [1.0]
    return ids, out_weights
