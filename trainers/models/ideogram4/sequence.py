"""Ideogram 4's packed sequence, as Ideogram4Pipeline lays it out: [left padding][text][image tokens], each image
token a 2x2 patch of the autoencoder's latents with its 128 channels in (patch row, patch column, channel) order.
The padding is its own segment (it attends to nothing real) and text positions count from the first real token, so
what the text and image tokens compute does not depend on how much padding there is (the trainer trims it)."""
from __future__ import annotations

import torch

PATCH = 2
IMAGE_POSITION_OFFSET = 65536  # transformer_ideogram4's: image positions never meet text positions
PADDING, TEXT, IMAGE = 0, 3, 2  # the indicator of each role (SEQUENCE_PADDING_INDICATOR is the padding's segment)


def patchify(latents: torch.Tensor) -> torch.Tensor:
    """(B, C, h, w) -> (B, h/2 x w/2, 2 x 2 x C), row by row, as the pipeline's tokens."""
    b, c, h, w = latents.shape
    grid = latents.reshape(b, c, h // PATCH, PATCH, w // PATCH, PATCH).permute(0, 2, 4, 3, 5, 1)
    return grid.reshape(b, (h // PATCH) * (w // PATCH), PATCH * PATCH * c)


def unpatchify(tokens: torch.Tensor, height: int, width: int) -> torch.Tensor:
    """The inverse of patchify for latents of (height, width) (the pipeline's decode)."""
    b, _, channels = tokens.shape
    c = channels // (PATCH * PATCH)
    grid = tokens.reshape(b, height // PATCH, width // PATCH, PATCH, PATCH, c).permute(0, 5, 1, 3, 2, 4)
    return grid.reshape(b, c, height, width)


def image_positions(rows: int, cols: int, batch: int, device: torch.device) -> torch.Tensor:
    """(B, rows x cols, 3) MRoPE positions (0, row, column) of the image tokens, offset from the text's."""
    h = torch.arange(rows, device=device).view(-1, 1).expand(rows, cols).reshape(-1)
    w = torch.arange(cols, device=device).view(1, -1).expand(rows, cols).reshape(-1)
    ids = torch.stack([torch.zeros_like(h), h, w], dim=1) + IMAGE_POSITION_OFFSET
    return ids.unsqueeze(0).expand(batch, -1, -1)


def packed(text: torch.Tensor, mask: torch.Tensor, image: torch.Tensor,
           positions: torch.Tensor) -> dict[str, torch.Tensor]:
    """The transformer's inputs for left-padded text features (B, L, F) with their mask (B, L) and image tokens
    (B, N, C) at `positions` (B, N, 3): the text first, then the image (its output is the last N tokens)."""
    batch, length = mask.shape
    real = mask.bool()
    count = (real.long().cumsum(dim=1) - 1).clamp(min=0) * real.long()
    text_positions = count.unsqueeze(-1).expand(-1, -1, 3)
    ones = torch.ones(batch, image.shape[1], dtype=torch.long, device=image.device)
    segment = torch.cat([torch.where(real, 1, -1), ones], dim=1)
    indicator = torch.cat([torch.where(real, TEXT, PADDING), ones * IMAGE], dim=1)
    features = torch.cat([text * real.unsqueeze(-1).to(text.dtype),
                          text.new_zeros(batch, image.shape[1], text.shape[-1])], dim=1)
    hidden = torch.cat([image.new_zeros(batch, length, image.shape[-1]), image], dim=1)
    return {"hidden_states": hidden, "encoder_hidden_states": features,
            "position_ids": torch.cat([text_positions.to(positions.device), positions], dim=1),
            "segment_ids": segment, "indicator": indicator}


def trimmed(text: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The text without the left padding every row of the batch has (at least one token kept)."""
    longest = max(int(mask.sum(dim=1).max()), 1)
    return text[:, -longest:], mask[:, -longest:]
