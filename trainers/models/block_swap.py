"""Layer offload (blocks_to_swap, layer_offload_fraction): the frozen weights of a transformer's last blocks live in
CPU memory, and each of those blocks gets its weights on the device only while it runs (its forward, and its
recomputation in the backward pass under gradient checkpointing), as sd-scripts' and musubi-tuner's block swap.

The weights are frozen, so the CPU copy is kept (pinned on CUDA) and nothing is copied back: host-to-device only.
While a block runs, the next one's weights are copied on a side stream (the next in the forward pass, the previous
in the backward pass, which recomputes the blocks in reverse), so the copy overlaps the compute. After a block runs
its weights point at the CPU copy again; autograd keeps the device copy it saved until the backward pass has used it.
Only parameters move; buffers stay on the device. Without gradient checkpointing autograd would keep every block's
device weights until the backward pass, so the options require it.

A full finetune trains the offloaded weights: the host copy is the parameter itself between uses, so the optimizer
steps it (and keeps its states) in host RAM. Each gradient is moved to the host as it is accumulated and held aside
while the next micro-batch runs (autograd cannot add a device gradient to a host one), then handed back to the
parameter when the backward pass ends: clipping, the optimizer and zero_grad see ordinary host gradients.

A UNet's blocks (down, mid, up) are not checkpointed as wholes: diffusers checkpoints the resnets and attentions
inside them, and a hook around the block would not run again for their recomputation. Each offloaded UNet block runs
under its own checkpoint, whose recomputation fetches the block's weights again.
"""
from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

_LISTS = ("transformer_blocks", "single_transformer_blocks")
_UNET_LISTS = ("down_blocks", "up_blocks")


class BlockSwap:
    def __init__(self, blocks: Sequence[nn.Module], device: torch.device, checkpoint_blocks: bool = False) -> None:
        self.device = device
        self.order = {id(block): index for index, block in enumerate(blocks)}
        self.blocks = list(blocks)
        self.parked: dict[int, list[tuple[nn.Parameter, torch.Tensor]]] = {}
        self.ahead: dict[int, tuple[list[torch.Tensor], Any]] = {}  # block -> (device weights, copy-done event)
        self.stream = torch.cuda.Stream(device) if device.type == "cuda" else None
        self.last = -1  # the index of the block that ran last: the direction the next copy goes in
        self.fetched = 0  # blocks whose weights arrived ahead of their turn (for tests and benchmarks)
        self.grads: dict[int, torch.Tensor] = {}  # trained parameter -> its host gradient so far
        self.hooked: set[int] = set()  # trained parameters whose gradients come home
        self.returning: dict[int, nn.Parameter] = {}  # gradients to hand back when this backward pass ends
        self.hidden: set[int] = set()  # trained parameters whose gradient is held aside until the backward pass ends
        for block in blocks:
            # a LoRA's own weights live in its network, not in the block; a finetune trains the block's own
            self.parked[id(block)] = [(p, self._host(p.data)) for p in block.parameters()]
            self._park(block)
            if checkpoint_blocks:
                block.forward = functools.partial(self._checkpointed, block, block.forward)
            else:
                block.register_forward_pre_hook(self._fetch)
                block.register_forward_hook(self._return)

    host_device = torch.device("cpu")

    def _host(self, tensor: torch.Tensor) -> torch.Tensor:
        return host_copy(tensor, self.device)

    def _park(self, block: nn.Module) -> None:
        for param, host in self.parked[id(block)]:
            param.data = host

    def _copy(self, block: nn.Module) -> list[torch.Tensor]:
        return [host.to(self.device, non_blocking=True) for _, host in self.parked[id(block)]]

    def _prefetch(self, index: int) -> None:
        if not 0 <= index < len(self.blocks) or id(self.blocks[index]) in self.ahead:
            return
        block = self.blocks[index]
        if self.stream is None:
            self.ahead[id(block)] = (self._copy(block), None)
            return
        self.stream.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(self.stream):
            weights = self._copy(block)
            done = torch.cuda.Event()
            done.record(self.stream)
        self.ahead[id(block)] = (weights, done)

    def _checkpointed(self, block: nn.Module, forward: Any, *args: Any, **kwargs: Any) -> Any:
        if not torch.is_grad_enabled():
            return self._swapped(block, forward, *args, **kwargs)
        return checkpoint(self._swapped, block, forward, *args, use_reentrant=False, **kwargs)

    def _swapped(self, block: nn.Module, forward: Any, *args: Any, **kwargs: Any) -> Any:
        self._fetch(block, args)
        try:
            return forward(*args, **kwargs)
        finally:
            self._park(block)

    def _adopt_trained(self, block: nn.Module) -> None:
        """A trained parameter's host copy as it is now: the optimizer stepped it in place, but a cast (full_bf16)
        or a move (accelerate's prepare) replaces it; its gradient held aside until the backward pass."""
        entries = self.parked[id(block)]
        for i, (param, host) in enumerate(entries):
            if not param.requires_grad:
                continue
            if param.data.data_ptr() != host.data_ptr() or param.dtype != host.dtype:
                self.ahead.pop(id(block), None)  # copied from the replaced tensor
                entries[i] = (param, self._host(param.data))
            if id(param) not in self.hooked:
                param.register_post_accumulate_grad_hook(self._gradient_home)
                self.hooked.add(id(param))
            if not torch.is_grad_enabled() or id(param) in self.hidden:  # no backward pass, or its recomputation
                continue
            self.hidden.add(id(param))
            if param.grad is None:  # zero_grad since the last backward pass: start over
                self.grads.pop(id(param), None)
            else:
                self.grads[id(param)] = param.grad
                param.grad = None

    def _gradient_home(self, param: nn.Parameter) -> None:
        grad = param.grad.to(self.host_device)
        param.grad = None
        held = self.grads.get(id(param))
        self.grads[id(param)] = grad if held is None else held.add_(grad)
        if not self.returning:
            torch.autograd.Variable._execution_engine.queue_callback(self._give_back_gradients)
        self.returning[id(param)] = param

    def _give_back_gradients(self) -> None:
        for key, param in self.returning.items():
            param.grad = self.grads[key]
        self.returning.clear()
        self.hidden.clear()

    def _fetch(self, block: nn.Module, args: Any) -> None:
        self._adopt_trained(block)
        index = self.order[id(block)]
        waiting = self.ahead.pop(id(block), None)
        if waiting is None:
            weights = self._copy(block)
        else:
            weights, done = waiting
            self.fetched += 1
            if done is not None:  # the copy ran on the side stream: the compute waits for it, the allocator too
                current = torch.cuda.current_stream(self.device)
                current.wait_event(done)
                for tensor in weights:
                    tensor.record_stream(current)
        for (param, _), tensor in zip(self.parked[id(block)], weights):
            param.data = tensor
        self._prefetch(index + 1 if index > self.last else index - 1)  # the backward pass starts on the last block
        self.last = index

    def restart(self, module: nn.Module, args: Any) -> None:
        """A forward pass of the whole denoiser begins: its blocks run first to last."""
        if self.hooked:  # a copy made before the optimizer stepped the host weights would be stale
            self.ahead.clear()
        self.last = -1
        self._prefetch(0)

    def _return(self, block: nn.Module, args: Any, output: Any) -> None:
        self._park(block)


def host_copy(tensor: torch.Tensor, device: torch.device) -> torch.Tensor:
    """`tensor` in CPU memory, pinned when it goes to a CUDA `device` from there."""
    host = tensor.detach().to("cpu")
    if device.type != "cuda":
        return host
    try:
        return host.pin_memory()
    except (NotImplementedError, RuntimeError):  # a quantized tensor type without pinning: copied unpinned
        return host


def place_with_swap(module: nn.Module, blocks: Sequence[nn.Module], device: torch.device) -> BlockSwap:
    """`module` on `device` except the swapped blocks' weights, which stay in CPU memory."""
    swap = BlockSwap(blocks, device, checkpoint_blocks=bool(unet_blocks(module)))
    module.register_forward_pre_hook(swap.restart)
    parked = {id(p) for entries in swap.parked.values() for p, _ in entries}
    for param in module.parameters():
        if id(param) not in parked:
            param.data = param.data.to(device)
    buffers_to(module, device)
    return swap


def buffers_to(module: nn.Module, device: torch.device) -> None:
    """Every buffer of `module` on `device` (its parameters where they are)."""
    for sub in module.modules():
        for name, buffer in sub._buffers.items():
            if buffer is not None:
                sub._buffers[name] = buffer.to(device)


def unet_blocks(denoiser: nn.Module) -> list[nn.Module]:
    """A UNet's down, mid and up blocks in the order they run; none for a transformer."""
    down, up = (list(getattr(denoiser, name, ())) for name in _UNET_LISTS)
    mid = getattr(denoiser, "mid_block", None)
    return down + ([mid] if mid is not None else []) + up if down else []


def swap_units(denoiser: nn.Module) -> int:
    """What blocks_to_swap counts in `denoiser`: a UNet's down, mid and up blocks; a transformer's blocks, two FLUX
    single blocks as one (a double block is about two single ones' size: sd-scripts' count)."""
    if unet := unet_blocks(denoiser):
        return len(unet)
    doubles, singles = (len(getattr(denoiser, name, ())) for name in _LISTS)
    return doubles + singles // 2


def offloaded_blocks(values: Mapping[str, Any], denoiser: nn.Module) -> int:
    """The blocks_to_swap count the config asks for: layer_offload_fraction of the denoiser's blocks, or
    blocks_to_swap itself."""
    fraction = values.get("layer_offload_fraction")
    if fraction:
        units = swap_units(denoiser)
        if not units:
            raise ValueError(f"{type(denoiser).__name__} has no transformer or UNet blocks for a fraction to count: "
                             "give blocks_to_swap instead")
        return max(1, round(float(fraction) * units))
    return int(values.get("blocks_to_swap") or 0)
