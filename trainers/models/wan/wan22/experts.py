"""The Wan 2.2 A14B pair as one denoiser: each sample of a batch goes to the expert its timestep belongs to (the
high-noise `transformer` at or above the boundary, as WanPipeline switches, the low-noise `transformer_2` below), so
each expert, and its LoRA, only ever sees its own timestep range. musubi-tuner routes a whole batch by its first
sample's timestep and draws the others again until they fall on the same side; splitting the batch trains each sample
at the noise level it drew and gives each expert the same range."""
from __future__ import annotations

from typing import Any

import torch
from torch import nn

NUM_TIMESTEPS = 1000
EXPERT_NAMES = ("high_noise", "low_noise")  # transformer, transformer_2


class ExpertPair(nn.Module):
    """`transformer` (high noise) and `transformer_2` (low noise) switched at `boundary` (a ratio of 1000 timesteps);
    called as a WanTransformer3DModel is."""

    _repeated_blocks = ("WanTransformerBlock",)  # what compile_blocks compiles (diffusers' own list for Wan)

    def __init__(self, transformer: nn.Module, transformer_2: nn.Module, boundary: float) -> None:
        super().__init__()
        self.transformer, self.transformer_2 = transformer, transformer_2
        self.boundary = boundary

    @property
    def experts(self) -> tuple[nn.Module, nn.Module]:
        return self.transformer, self.transformer_2

    @property
    def config(self) -> Any:
        return self.transformer.config

    @property
    def dtype(self) -> torch.dtype:
        return self.transformer.dtype

    def set_attn_processor(self, processor: Any) -> None:
        for expert in self.experts:
            expert.set_attn_processor(processor)

    def enable_gradient_checkpointing(self) -> None:
        for expert in self.experts:
            expert.enable_gradient_checkpointing()

    def forward(self, hidden_states: torch.Tensor, timestep: torch.Tensor, encoder_hidden_states: torch.Tensor,
                return_dict: bool = False, boundary: float | None = None, **kwargs: Any) -> tuple[torch.Tensor]:
        """`boundary`: the run's (timestep_boundary), else the folder's. Routed on `timestep` as given (floats: a
        timestep just below the boundary is not rounded onto it by a 16-bit cast), then cast to the latents'."""
        timestep = timestep.expand(hidden_states.shape[0]) if timestep.ndim == 0 else timestep
        per_sample = timestep if timestep.ndim == 1 else timestep.amax(dim=1)
        high = per_sample >= (self.boundary if boundary is None else boundary) * NUM_TIMESTEPS
        timestep = timestep.to(hidden_states.dtype)
        parts: list[tuple[torch.Tensor, torch.Tensor]] = []
        for expert, chosen in ((self.transformer, high), (self.transformer_2, ~high)):
            index = chosen.nonzero().flatten()
            if len(index) == 0:
                continue
            if len(index) == len(timestep):  # the whole batch: no copies
                return (expert(hidden_states=hidden_states, timestep=timestep,
                               encoder_hidden_states=encoder_hidden_states, return_dict=False, **kwargs)[0],)
            out = expert(hidden_states=hidden_states[index], timestep=timestep[index],
                         encoder_hidden_states=encoder_hidden_states[index], return_dict=False,
                         **{k: v[index] if isinstance(v, torch.Tensor) else v for k, v in kwargs.items()})[0]
            parts.append((index, out))
        order = torch.cat([index for index, _ in parts]).argsort()
        return (torch.cat([out for _, out in parts])[order],)
