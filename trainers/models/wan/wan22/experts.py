"""The Wan 2.2 A14B pair as one denoiser: each sample of a batch goes to the expert its timestep belongs to (the
high-noise `transformer` at or above the boundary, as WanPipeline switches, the low-noise `transformer_2` below), so
each expert, and its LoRA, only ever sees its own timestep range. musubi-tuner routes a whole batch by its first
sample's timestep and draws the others again until they fall on the same side; splitting the batch trains each sample
at the noise level it drew and gives each expert the same range.

offload_inactive_dit (musubi-tuner's): one expert's weights on the device at a time (InactiveOffload). A batch of one
expert's timesteps runs it as usual; a batch of both runs each expert under a checkpoint, so that its backward
recomputes it with its weights brought back, instead of keeping both experts' on the device."""
from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from trainers.models.block_swap import buffers_to, host_copy

NUM_TIMESTEPS = 1000
EXPERT_NAMES = ("high_noise", "low_noise")  # transformer, transformer_2


class ExpertPair(nn.Module):
    """`transformer` (high noise) and `transformer_2` (low noise) switched at `boundary` (a ratio of 1000 timesteps);
    called as a WanTransformer3DModel is."""

    _repeated_blocks = ("WanTransformerBlock",)  # what compile_blocks compiles (diffusers' own list for Wan)
    offload: "InactiveOffload | None" = None

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
            inputs = {"hidden_states": hidden_states[index], "timestep": timestep[index],
                      "encoder_hidden_states": encoder_hidden_states[index],
                      **{k: v[index] if isinstance(v, torch.Tensor) else v for k, v in kwargs.items()}}
            if self.offload is not None and torch.is_grad_enabled():  # its backward brings its weights back
                out = checkpoint(_run, expert, inputs, use_reentrant=False)
            else:
                out = _run(expert, inputs)
            parts.append((index, out))
        order = torch.cat([index for index, _ in parts]).argsort()
        return (torch.cat([out for _, out in parts])[order],)


def _run(expert: nn.Module, inputs: dict[str, Any]) -> torch.Tensor:
    return expert(return_dict=False, **inputs)[0]


class InactiveOffload:
    """musubi-tuner's offload_inactive_dit: the weights of the expert not being called wait in host RAM (pinned on
    CUDA); an expert's come to the device when it is called (a forward pre-hook: its timesteps came, in a step, a
    recomputation or a sample), and the other's go back to their host copy (they are frozen: nothing is copied
    back). The pair reads as on the device (`anchor`, its first parameter: where the loop and samples put inputs)."""

    def __init__(self, pair: ExpertPair, device: torch.device, first: nn.Module) -> None:
        self.device, self.experts = device, pair.experts
        self.hosts = {id(expert): [(p, host_copy(p.data, device)) for p in expert.parameters()]
                      for expert in pair.experts}
        self.active: nn.Module | None = None
        self.moves = 0  # experts brought to the device (for tests and the log)
        for expert in pair.experts:
            self._park(expert)
            buffers_to(expert, device)
            expert.register_forward_pre_hook(lambda module, args: self.activate(module))
        pair.anchor = nn.Parameter(torch.empty(0, dtype=pair.dtype, device=device), requires_grad=False)
        pair.offload = self
        self.activate(first)

    def activate(self, expert: nn.Module) -> None:
        if expert is self.active:
            return
        if self.active is not None:
            self._park(self.active)
            if self.device.type == "cuda":
                torch.cuda.empty_cache()  # the parked expert's device memory, for the one coming
        for param, host in self.hosts[id(expert)]:
            param.data = host.to(self.device, non_blocking=True, copy=True)  # a copy on the CPU too (tests)
        self.active = expert
        self.moves += 1

    def on_host(self, expert: nn.Module) -> bool:
        """Whether every weight of `expert` is its host copy (none on the device)."""
        return all(param.data.data_ptr() == host.data_ptr() for param, host in self.hosts[id(expert)])

    def _park(self, expert: nn.Module) -> None:
        for param, host in self.hosts[id(expert)]:
            param.data = host
