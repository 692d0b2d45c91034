"""A tiny random-init Wan 2.2 A14B pipeline (tests): Wan 2.1's tiny parts (trainers/models/wan/tiny.py) with a second
transformer (the low-noise expert, other weights) and the T2V boundary_ratio, as the published folder lays them out."""
from __future__ import annotations

from pathlib import Path

import torch

from trainers.models.tiny_flow import write_tiny_t5_tokenizer
from trainers.models.wan.tiny import tiny_umt5, tiny_wan_transformer, tiny_wan_vae
from trainers.models.wan.wan22.rules import T2V_BOUNDARY


def build_tiny_wan22(folder: Path, seed: int = 0, boundary: float = T2V_BOUNDARY) -> Path:
    """Save a tiny two-expert WanPipeline to `folder`."""
    from diffusers import FlowMatchEulerDiscreteScheduler, WanPipeline
    from transformers import T5TokenizerFast

    torch.manual_seed(seed)
    write_tiny_t5_tokenizer(folder / "tokenizer")
    tokenizer = T5TokenizerFast.from_pretrained(folder / "tokenizer")
    pipe = WanPipeline(tokenizer=tokenizer, text_encoder=tiny_umt5(len(tokenizer)), vae=tiny_wan_vae(),
                       scheduler=FlowMatchEulerDiscreteScheduler(shift=5.0), transformer=tiny_wan_transformer(),
                       transformer_2=tiny_wan_transformer(), boundary_ratio=boundary)
    pipe.save_pretrained(folder)
    return folder
