"""Frozen, deterministic parts of a step give the same rows for the same inputs: a row computed before is taken
from a memo instead of computed again.

Two such parts: the frozen text encoders (a row per caption, keyed by its token ids; only when no subset shuffles or
drops tags: Session.memoize_text) and the VAE's encoder (a row per image, keyed by what decides its pixels: file,
bucket, flip; none with random crops or colour jitter). So from the second epoch on, a dataset with fixed
captions runs no text encoder (SD1.5 at 64 px on a CPU: 9% of a step) and one without random crops or colour jitter
runs no VAE (SD1.5 at 64 px on a CPU: 1.12x steps/s; its encoder costs more than the UNet forward at 512 px too).

A row's value must not depend on what a process has seen: a convolution or matrix product rounds a row of a batch of
4 differently from the same row alone, so a row kept from one batch is not bit-equal to that row computed in another,
and a resumed run (its memo empty) would train on other floats than the uninterrupted one. So every row that has a
key is computed alone, whether it is then kept or not (the memo full); rows without a key are never kept and are
computed together. Computed alone, a miss costs more than in a batch (on 2 CPU threads, a batch of 4 at 64 px:
SD1.5's VAE ~1.5x, CLIP-L ~2x), once per image and caption. Kept rows live on the CPU, up to a byte budget. A run
without memos (memoize_encoders = false) computes every batch whole, as sd-scripts does.
"""
from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence

import torch
from torch import nn

TEXT_BYTES = 512 * 2**20  # kept text-encoder outputs (SD1.5: ~0.24 MB per caption; T5-XXL at 512 tokens: 8 MB)
LATENT_BYTES = 1024 * 2**20  # kept latent distributions (SD1.5 at 512 px: 128 KB per image; SDXL at 1024: 256 KB)

Rows = tuple[torch.Tensor, torch.Tensor | None]  # a batch's two outputs: (hidden, pooled) or (mean, std)
Select = slice | list[int]  # which rows of the batch
Compute = Callable[[Select], Rows]  # the outputs of the selected rows of the batch, in that order


class RowMemo:
    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.kept = 0  # bytes
        self.rows: dict[Hashable, Rows] = {}  # each (1, ...) on the CPU
        self.device = torch.device("cpu")  # where the computed outputs were

    def __call__(self, compute: Compute, keys: Sequence[Hashable | None] | None) -> Rows:
        """The batch's outputs: rows without a key (None, or no `keys`) computed together, each row with a key
        kept from before or computed alone (and kept while the budget lasts)."""
        unkeyed = [i for i, key in enumerate(keys or []) if key is None]
        if not keys or len(unkeyed) == len(keys):
            return compute(slice(None))
        parts: list[Rows | None] = [None] * len(keys)
        if unkeyed:
            first, second = compute(unkeyed)
            self.device = first.device
            for j, i in enumerate(unkeyed):
                parts[i] = first[j:j + 1], None if second is None else second[j:j + 1]
        for i, key in enumerate(keys):
            if key is not None:
                kept = self.rows.get(key)
                parts[i] = kept if kept is not None else self._keep(key, compute([i]))
        rows = [p for p in parts if p is not None]  # every row is filled by now
        first = torch.cat([p[0].to(self.device) for p in rows])
        seconds = [p[1] for p in rows]
        second = None if seconds[0] is None else torch.cat([s.to(self.device) for s in seconds if s is not None])
        return first, second

    def _keep(self, key: Hashable, row: Rows) -> Rows:
        self.device = row[0].device
        size = sum(t.nbytes for t in row if t is not None)
        if self.kept + size <= self.limit:
            hidden, pooled = row
            self.rows[key] = (hidden.detach().to("cpu", copy=True),
                              None if pooled is None else pooled.detach().to("cpu", copy=True))
            self.kept += size
        return row


def deterministic(encoder: nn.Module) -> bool:
    """No dropout in `encoder` (CLIP's is 0), so equal tokens give equal outputs. T5 (dropout 0.1) stays out even
    though the flow families run it in eval mode: its share of a step is small, and runs that repeat captions
    usually cache its outputs (cache_text_encoder_outputs)."""
    config = getattr(encoder, "config", None)
    rates = [getattr(config, name, 0) or 0 for name in ("dropout", "attention_dropout", "dropout_rate")]
    return not any(rates) and not any(isinstance(m, nn.Dropout) and m.p > 0 for m in encoder.modules())


def text_keys(ids: list[torch.Tensor], weights: list[torch.Tensor] | None) -> list[tuple[bytes, ...]]:
    """Per batch row: its token ids under every tokenizer (and token weights, with weighted captions)."""
    parts = [t.detach().cpu().contiguous() for t in ids + list(weights or [])]
    return [tuple(p[i].reshape(-1).view(torch.uint8).numpy().tobytes() for p in parts)
            for i in range(parts[0].shape[0])]


def rows_of(tensors: list[torch.Tensor] | None, rows: Select) -> list[torch.Tensor] | None:
    """The selected rows of each of a batch's tensors."""
    return None if tensors is None else [t[rows] for t in tensors]
