"""A tiny random-init Wan 2.2 A14B pipeline (tests): Wan 2.1's tiny parts (trainers/models/wan/tiny.py) with a second
transformer (the low-noise expert, other weights) and the boundary_ratio, as the published folders lay them out (text-to-video and image-to-video)."""
from __future__ import annotations

from pathlib import Path

import torch

from trainers.models.tiny_flow import write_tiny_t5_tokenizer
from trainers.models.wan.tiny import LATENT_CHANNELS, tiny_umt5, tiny_wan_transformer, tiny_wan_vae
from trainers.models.wan.wan22.rules import I2V_BOUNDARY, T2V_BOUNDARY


def build_tiny_wan22(folder: Path, seed: int = 0, i2v: bool = False) -> Path:
    """Save a tiny two-expert WanPipeline to `folder`; `i2v`: a WanImageToVideoPipeline (Wan 2.2 I2V A14B: experts
    of 16 + 4 + 16 input channels, boundary 0.9, no CLIP image encoder)."""
    import diffusers
    from diffusers import FlowMatchEulerDiscreteScheduler
    from transformers import T5TokenizerFast

    torch.manual_seed(seed)
    write_tiny_t5_tokenizer(folder / "tokenizer")
    tokenizer = T5TokenizerFast.from_pretrained(folder / "tokenizer")
    channels = {"in_channels": 2 * LATENT_CHANNELS + 4} if i2v else {}
    pipeline = getattr(diffusers, "WanImageToVideoPipeline" if i2v else "WanPipeline")
    pipe = pipeline(tokenizer=tokenizer, text_encoder=tiny_umt5(len(tokenizer)), vae=tiny_wan_vae(),
                    scheduler=FlowMatchEulerDiscreteScheduler(shift=5.0), transformer=tiny_wan_transformer(**channels),
                    transformer_2=tiny_wan_transformer(**channels),
                    boundary_ratio=I2V_BOUNDARY if i2v else T2V_BOUNDARY)
    pipe.save_pretrained(folder)
    return folder
