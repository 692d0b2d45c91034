"""HiDream-O1-Image's 'text encoder': none of its own (the denoiser's Qwen3-VL decoder reads the caption at every
step). It stands where the layer runs text encoders (caching captions, the row memo, placing them on a device): it
holds no weights and passes the token ids on as encode_prompts' second tensor."""
from __future__ import annotations

import torch
from torch import nn


class CaptionTokens(nn.Module):
    """A module of no weights but a device (a parameter of no size)."""

    def __init__(self) -> None:
        super().__init__()
        self.anchor = nn.Parameter(torch.zeros(0), requires_grad=False)

    def gradient_checkpointing_enable(self, **kwargs: object) -> None:
        """Nothing to checkpoint."""

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return ids
