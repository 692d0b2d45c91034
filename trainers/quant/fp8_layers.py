"""fp8 storage of frozen layers that trains through them.

Each Linear, Conv and Embedding layer keeps its weight in float8_e4m3fn and casts it to the compute dtype while it
runs, as diffusers' layerwise casting does. That hook casts the parameter in place and back after the forward, so
the backward pass, which reads the parameter autograd saved, met the fp8 weight ("expected scalar type BFloat16 but
found Float8_e4m3fn"). Here a Linear or Conv layer's forward is an autograd Function that saves the fp8 weight and
casts it again for the input's gradient: 8 bits a weight are held between the passes. The layers are frozen.

The hook is registered under diffusers' layerwise-casting name, so a diffusers model's `dtype` is the compute dtype
as with diffusers' own hook."""
from __future__ import annotations

import re
from typing import Any, Callable

import torch
import torch.nn.functional as F
from diffusers.hooks import HookRegistry, ModelHook
from torch import nn

STORAGE_DTYPE = torch.float8_e4m3fn
HOOK_NAME = "layerwise_casting"  # the name diffusers' get_parameter_dtype asks for
_CONV_INPUT_GRAD: dict[type, Callable[..., torch.Tensor]] = {
    nn.Conv1d: torch.nn.grad.conv1d_input, nn.Conv2d: torch.nn.grad.conv2d_input,
    nn.Conv3d: torch.nn.grad.conv3d_input}
_STORED = (nn.Linear, nn.Embedding, *_CONV_INPUT_GRAD)


def store_in_fp8(module: nn.Module, compute_dtype: torch.dtype, skip_patterns: tuple[str, ...] = (),
                 skip_classes: tuple[type[nn.Module], ...] = ()) -> int:
    """Every Linear, Conv and Embedding layer of `module` whose qualified name matches none of `skip_patterns`
    (regular expressions searched as diffusers does: a module skipped skips all inside it) and that is none of
    `skip_classes`, stored in fp8 and run in `compute_dtype`; the number of layers stored."""
    stored = 0

    def visit(sub: nn.Module, name: str) -> None:
        nonlocal stored
        if isinstance(sub, skip_classes) or any(re.search(p, name) for p in skip_patterns):
            return
        if isinstance(sub, _STORED):
            sub.requires_grad_(False)
            HookRegistry.check_if_exists_or_initialize(sub).register_hook(_Fp8Storage(compute_dtype), HOOK_NAME)
            stored += 1
            return
        for child_name, child in sub.named_children():
            visit(child, f"{name}.{child_name}" if name else child_name)

    visit(module, "")
    return stored


class _Fp8Storage(ModelHook):
    def __init__(self, compute_dtype: torch.dtype) -> None:
        super().__init__()
        self.compute_dtype = compute_dtype

    def initialize_hook(self, module: nn.Module) -> nn.Module:
        module.weight.data = module.weight.data.to(STORAGE_DTYPE)
        if getattr(module, "bias", None) is not None:
            module.bias.data = module.bias.data.to(self.compute_dtype)
        return module

    def new_forward(self, module: nn.Module, x: torch.Tensor) -> torch.Tensor:
        if isinstance(module, nn.Embedding):  # the indices have no gradient: nothing to keep for the backward
            return F.embedding(x, module.weight.to(self.compute_dtype), module.padding_idx, module.max_norm,
                               module.norm_type, module.scale_grad_by_freq, module.sparse)
        return _Fp8Layer.apply(x, module, self.compute_dtype)


def _run(layer: nn.Module, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    bias = None if layer.bias is None else layer.bias.to(weight.dtype)
    if isinstance(layer, nn.Linear):
        return F.linear(x, weight, bias)
    return layer._conv_forward(x, weight, bias)


class _Fp8Layer(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, layer: nn.Module, compute_dtype: torch.dtype) -> torch.Tensor:
        ctx.layer, ctx.x_dtype, ctx.x_shape = layer, x.dtype, x.shape
        ctx.save_for_backward(layer.weight, x if _gradient_needs_input(layer) else None)
        return _run(layer, x.to(compute_dtype), layer.weight.to(compute_dtype))

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, None, None]:
        if not ctx.needs_input_grad[0]:
            return None, None, None
        stored, x = ctx.saved_tensors
        layer, weight = ctx.layer, stored.to(grad.dtype)
        if isinstance(layer, nn.Linear):
            grad_x = grad @ weight
        elif x is None:  # fixed zero padding: the input's gradient from the input's shape alone
            grad_x = _CONV_INPUT_GRAD[type(layer)](ctx.x_shape, weight, grad, layer.stride, layer.padding,
                                                   layer.dilation, layer.groups)
        else:  # another padding mode, or 'same' padding: through the layer once more
            with torch.enable_grad():
                again = x.detach().to(grad.dtype).requires_grad_()
                (grad_x,) = torch.autograd.grad(_run(layer, again, weight), again, grad)
        return grad_x.to(ctx.x_dtype), None, None


def _gradient_needs_input(layer: nn.Module) -> bool:
    """Whether the input's gradient needs the input itself (a Conv layer that pads other than with fixed zeros)."""
    return not isinstance(layer, nn.Linear) and (layer.padding_mode != "zeros" or isinstance(layer.padding, str))
