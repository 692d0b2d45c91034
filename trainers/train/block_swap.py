"""blocks_to_swap: the frozen weights of a transformer's last blocks live in CPU memory, and each of those blocks
gets its weights on the device only while it runs (its forward, and its recomputation in the backward pass under
gradient checkpointing), as sd-scripts' block swap does for FLUX and SD3 LoRAs.

The weights are frozen, so the CPU copy is kept (pinned on CUDA) and nothing is copied back: after a block runs,
its weights point at the CPU copy again and the device copy is freed. Only parameters move; buffers stay on the
device. Without gradient checkpointing autograd would keep every block's device weights until the backward pass,
so the options require it.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import nn


class BlockSwap:
    def __init__(self, blocks: Sequence[nn.Module], device: torch.device) -> None:
        self.device = device
        self.parked: dict[int, list[tuple[nn.Parameter, torch.Tensor]]] = {}
        for block in blocks:
            # a LoRA's own weights live in its network, not in the block: every weight here is a frozen base weight
            self.parked[id(block)] = [(p, self._host(p.data)) for p in block.parameters()]
            self._park(block)
            block.register_forward_pre_hook(self._fetch)
            block.register_forward_hook(self._return)

    def _host(self, tensor: torch.Tensor) -> torch.Tensor:
        host = tensor.detach().to("cpu")
        return host.pin_memory() if self.device.type == "cuda" else host

    def _park(self, block: nn.Module) -> None:
        for param, host in self.parked[id(block)]:
            param.data = host

    def _fetch(self, block: nn.Module, args: Any) -> None:
        for param, host in self.parked[id(block)]:
            param.data = host.to(self.device, non_blocking=True)

    def _return(self, block: nn.Module, args: Any, output: Any) -> None:
        self._park(block)


def place_with_swap(module: nn.Module, blocks: Sequence[nn.Module], device: torch.device) -> BlockSwap:
    """`module` on `device` except the swapped blocks' frozen weights, which stay in CPU memory."""
    swap = BlockSwap(blocks, device)
    parked = {id(p) for entries in swap.parked.values() for p, _ in entries}
    for param in module.parameters():
        if id(param) not in parked:
            param.data = param.data.to(device)
    for sub in module.modules():
        for name, buffer in sub._buffers.items():
            if buffer is not None:
                sub._buffers[name] = buffer.to(device)
    return swap
