"""A long prompt's text-encoder states put back together (sd-scripts' `encode_tokens`): the text encoder ran on each
75-token chunk of the ids data/prompt_chunks.py made; the states are the first BOS, every chunk's token states and
the last chunk's final state (chunks x 75 + 2 positions), times each token's weight with weighted captions."""
from __future__ import annotations

import torch


def chunk_count(ids: torch.Tensor, length: int) -> int:
    """How many chunks of `length` tokens (the text encoder's positions) a batch of ids (B, chunks x length)
    holds; ids that fit its positions are one chunk."""
    if ids.shape[-1] <= length:
        return 1
    if ids.shape[-1] % length:
        raise ValueError(f"token ids of length {ids.shape[-1]} are not whole {length}-token chunks")
    return ids.shape[-1] // length


def merge_chunks(states: torch.Tensor, chunks: int) -> torch.Tensor:
    """(B, chunks x L, ...) per-chunk outputs -> (B, chunks x (L - 2) + 2, ...): the first BOS, each chunk's
    inner positions, the last position; one chunk is returned as it is."""
    if chunks == 1:
        return states
    length = states.shape[1] // chunks
    parts = [states[:, :1]] + [states[:, k * length + 1:(k + 1) * length - 1] for k in range(chunks)]
    return torch.cat(parts + [states[:, -1:]], dim=1)


def apply_weights(hidden: torch.Tensor, weights: torch.Tensor | None, chunks: int) -> torch.Tensor:
    """Hidden states (merged) times their tokens' weights (per chunk, as tokenized)."""
    if weights is None:
        return hidden
    merged = merge_chunks(weights.reshape(hidden.shape[0], -1), chunks)
    return hidden * merged.to(hidden.device, hidden.dtype).unsqueeze(-1)
