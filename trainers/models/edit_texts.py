"""Cached text-encoder outputs of edit models whose text encoder reads the control images with the caption
(Qwen-Image-Edit): one encoding per pair, not per caption, as musubi-tuner caches them. Each is keyed by the caption,
its control files (path, size, modification time) and the target's bucket, so a pair whose control image changed is
encoded again; the pairs are encoded once before the first step (cache_text_encoder_outputs), the text encoder on
the accelerator meanwhile, and read instead of the caption's own encoding at each step.
"""
from __future__ import annotations

from collections.abc import Hashable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

PairKey = tuple[str, tuple[tuple[str, int, int], ...], tuple[int, int]]


def pair_key(caption: str, controls: tuple[Path, ...], bucket: tuple[int, int]) -> PairKey:
    """What a pair's encoding depends on: its caption, its control files as they are now, and its bucket."""
    files = tuple((str(path), path.stat().st_size, path.stat().st_mtime_ns) for path in controls)
    return caption, files, tuple(bucket)  # type: ignore[return-value]


@contextmanager
def reading_images(model: Any, device: torch.device | None = None) -> Iterator[Any]:
    """The model as it encodes prompts read with their images: its text encoder encoding afresh (not from the
    captions' cache, whose encodings read no image), on `device` (put back after), or where it is (a sample mid-run:
    on the CPU when the captions are cached, where moving it to the accelerator could run the card out of memory)."""
    encoder = model.text_encoders[0]
    home = next(encoder.parameters()).device
    encoder.to(device or home)
    try:
        yield replace(model, cached_texts=None)
    finally:
        encoder.to(home)


class PairTexts:
    """Each training sample's pair encoding (hidden states, text mask), encoded before training."""

    def __init__(self, session: Any, controls: Any, family: Any) -> None:
        catalog, dataset, model = session.catalog, session.loader.dataset, session.model
        self.rows: dict[int, PairKey] = {}  # sample index -> its pair's key
        self.embeds: dict[Hashable, tuple[torch.Tensor, torch.Tensor]] = {}
        first: dict[PairKey, int] = {}
        for index, image_index in enumerate(catalog.samples):
            image = catalog.images[image_index]
            if image.path in controls.pairs:
                key = pair_key(dataset.caption(0, index), controls.pairs[image.path], image.bucket)
                self.rows[index] = key
                first.setdefault(key, index)
        try:
            with reading_images(model, session.accelerator.device) as fresh:
                for key, index in first.items():
                    target = catalog.images[catalog.samples[index]].path
                    family.slot.pixels = [controls.control(path, 0, index)[None] for path in controls.pairs[target]]
                    with torch.no_grad():
                        hidden, mask = fresh.encode_texts([key[0]], session.cfg.clip_skip)
                    self.embeds[key] = (hidden[0].cpu(), mask[0].cpu())
        finally:
            family.slot.pixels = None

    def batch(self, keys: torch.Tensor, batch: dict[str, Any]) -> dict[str, Any]:
        """`batch` with each sample's pair encoding as its cached text (a sample left out keeps its caption's),
        padded to the longest (zero states, masked)."""
        rows = []
        for row, (_, index) in enumerate(keys.tolist()):
            key = self.rows.get(int(index))
            rows.append(self.embeds[key] if key is not None else
                        (batch["prompt_embeds"][row], batch["pooled_embeds"][row]))
        longest = max(hidden.shape[0] for hidden, _ in rows)
        hidden = torch.stack([_padded(h, longest) for h, _ in rows])
        mask = torch.stack([_padded(m, longest) for _, m in rows])
        return {**batch, "prompt_embeds": hidden, "pooled_embeds": mask}


def _padded(tensor: torch.Tensor, length: int) -> torch.Tensor:
    return torch.cat([tensor, tensor.new_zeros(length - tensor.shape[0], *tensor.shape[1:])])
