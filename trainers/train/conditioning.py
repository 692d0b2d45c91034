"""The inputs a denoiser is conditioned on, from a training batch (both losses, diffusion and flow, read them)."""
from __future__ import annotations

from typing import Any

import torch

from trainers.models import SizeConditioning


def conditioning(batch: dict[str, Any], device: torch.device) -> tuple[Any, Any, Any]:
    """What the denoiser is conditioned on: the prompt's token ids, or its cached encoder outputs (prompt and
    pooled embeddings), and the SDXL size conditioning."""
    sizes = (SizeConditioning(batch["original_size"], batch["crop_top_left"], batch["target_size"])
             if "original_size" in batch else None)  # clip batches (video families) have no SDXL sizes
    input_ids = [ids.to(device) for ids in batch["input_ids"]] if "input_ids" in batch else None
    embeds = None
    if "prompt_embeds" in batch:
        pooled = batch.get("pooled_embeds")
        embeds = (batch["prompt_embeds"].to(device), None if pooled is None else pooled.to(device))
    return input_ids, sizes, embeds
