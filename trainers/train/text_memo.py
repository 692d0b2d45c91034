"""Frozen text encoders give the same outputs for the same tokens: a batch whose every caption was encoded before is
not encoded again.

Only used while the text encoders are frozen, without dropout (`deterministic`), and their outputs are not cached
already (cache_text_encoder_outputs).
A batch with any new caption is encoded whole, exactly as without the memo, and its rows are kept (on the CPU, up to
MEMO_BYTES in all); a batch of known captions is put together from the kept rows. From the second epoch on, a
dataset with fixed captions runs no text encoder (on SD1.5 at 64 px on a CPU, 9% of a step). Captions that change
every step (shuffle_caption, dropout) simply miss and cost one dictionary lookup.
"""
from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

MEMO_BYTES = 512 * 2**20  # kept outputs in all (SD1.5: ~0.24 MB per caption; T5-XXL at 512 tokens: 8 MB)

Encoded = tuple[torch.Tensor, torch.Tensor | None]  # (hidden states, pooled) of a batch


class TextMemo:
    def __init__(self, limit: int | None = None) -> None:
        self.limit = MEMO_BYTES if limit is None else limit
        self.kept = 0  # bytes
        self.rows: dict[bytes, tuple[torch.Tensor, torch.Tensor | None]] = {}
        self.device = torch.device("cpu")  # where the encoders' outputs were

    def __call__(self, encode: Callable[[list[torch.Tensor], list[torch.Tensor] | None], Encoded],
                 ids: list[torch.Tensor], weights: list[torch.Tensor] | None) -> Encoded:
        """`encode(ids, weights)` for the batch, or the same outputs put together from rows seen before."""
        keys = _row_keys(ids, weights)
        known = [self.rows.get(k) for k in keys]
        if all(row is not None for row in known) and len({row[0].shape for row in known}) == 1:
            hidden = torch.stack([h for h, _ in known]).to(self.device)
            pooled = None if known[0][1] is None else torch.stack([p for _, p in known]).to(self.device)
            return hidden, pooled
        hidden, pooled = encode(ids, weights)
        self.device = hidden.device
        for i, key in enumerate(keys):
            size = hidden[i].nbytes + (0 if pooled is None else pooled[i].nbytes)
            if key not in self.rows and self.kept + size <= self.limit:
                self.rows[key] = (hidden[i].detach().to("cpu", copy=True),
                                  None if pooled is None else pooled[i].detach().to("cpu", copy=True))
                self.kept += size
        return hidden, pooled


def deterministic(encoder: nn.Module) -> bool:
    """No dropout in `encoder` (CLIP's is 0), so equal tokens give equal outputs. T5 (dropout 0.1) stays out even
    though the flow families run it in eval mode: its share of a step is small, and runs that repeat captions
    usually cache its outputs (cache_text_encoder_outputs)."""
    config = getattr(encoder, "config", None)
    rates = [getattr(config, name, 0) or 0 for name in ("dropout", "attention_dropout", "dropout_rate")]
    return not any(rates) and not any(isinstance(m, nn.Dropout) and m.p > 0 for m in encoder.modules())


def _row_keys(ids: list[torch.Tensor], weights: list[torch.Tensor] | None) -> list[bytes]:
    """Per batch row: its token ids under every tokenizer (and token weights, with weighted captions)."""
    parts = [t.detach().cpu().contiguous() for t in ids + list(weights or [])]
    return [b"|".join(p[i].reshape(-1).view(torch.uint8).numpy().tobytes() for p in parts)
            for i in range(parts[0].shape[0])]
