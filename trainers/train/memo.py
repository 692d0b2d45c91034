"""Frozen, deterministic parts of a step give the same rows for the same inputs: a batch whose every row was computed
before is put together from kept rows instead of computed again.

Two such parts: the frozen text encoders (a row per caption, keyed by its token ids) and the VAE's encoder (a row per
image, keyed by what decides its pixels: file, bucket, flip). A batch with any new row is computed whole, exactly as
without a memo, and its rows are kept (on the CPU, up to a byte budget); a batch of known rows is put together from
them. So from the second epoch on, a dataset with fixed captions runs no text encoder (SD1.5 at 64 px on a CPU: 9% of
a step) and one without random crops or colour jitter runs no VAE (SD1.5 at 64 px on a CPU: 1.12x steps/s; its encoder
costs more than the UNet forward at 512 px too).
Rows that change every step (shuffled or dropped captions, random crops) have no key or miss and cost one lookup.
The rows equal the computed ones up to the float rounding of another batch composition.
"""
from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence

import torch
from torch import nn

TEXT_BYTES = 512 * 2**20  # kept text-encoder outputs (SD1.5: ~0.24 MB per caption; T5-XXL at 512 tokens: 8 MB)
LATENT_BYTES = 1024 * 2**20  # kept latent distributions (SD1.5 at 512 px: 128 KB per image; SDXL at 1024: 256 KB)

Rows = tuple[torch.Tensor, torch.Tensor | None]  # a batch's two outputs: (hidden, pooled) or (mean, std)


class RowMemo:
    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.kept = 0  # bytes
        self.rows: dict[Hashable, tuple[torch.Tensor, torch.Tensor | None]] = {}
        self.device = torch.device("cpu")  # where the computed outputs were

    def __call__(self, compute: Callable[[], Rows], keys: Sequence[Hashable | None] | None) -> Rows:
        """`compute()` for the batch whose rows are `keys` (None: a row that is never kept), or the same outputs put
        together from rows kept before."""
        if not keys:
            return compute()
        known = [None if k is None else self.rows.get(k) for k in keys]
        if all(row is not None for row in known) and len({row[0].shape for row in known}) == 1:
            first = torch.stack([a for a, _ in known]).to(self.device)
            second = None if known[0][1] is None else torch.stack([b for _, b in known]).to(self.device)
            return first, second
        first, second = compute()
        self.device = first.device
        for i, key in enumerate(keys):
            size = first[i].nbytes + (0 if second is None else second[i].nbytes)
            if key is not None and key not in self.rows and self.kept + size <= self.limit:
                self.rows[key] = (first[i].detach().to("cpu", copy=True),
                                  None if second is None else second[i].detach().to("cpu", copy=True))
                self.kept += size
        return first, second


def deterministic(encoder: nn.Module) -> bool:
    """No dropout in `encoder` (CLIP's is 0), so equal tokens give equal outputs. T5 (dropout 0.1) stays out even
    though the flow families run it in eval mode: its share of a step is small, and runs that repeat captions
    usually cache its outputs (cache_text_encoder_outputs)."""
    config = getattr(encoder, "config", None)
    rates = [getattr(config, name, 0) or 0 for name in ("dropout", "attention_dropout", "dropout_rate")]
    return not any(rates) and not any(isinstance(m, nn.Dropout) and m.p > 0 for m in encoder.modules())


def text_keys(ids: list[torch.Tensor], weights: list[torch.Tensor] | None) -> list[bytes]:
    """Per batch row: its token ids under every tokenizer (and token weights, with weighted captions)."""
    parts = [t.detach().cpu().contiguous() for t in ids + list(weights or [])]
    return [b"|".join(p[i].reshape(-1).view(torch.uint8).numpy().tobytes() for p in parts)
            for i in range(parts[0].shape[0])]
