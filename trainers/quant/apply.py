"""Quantize a loaded model's frozen weights (base_model_precision, text_encoder_precision), after its family loads it
and before it is placed: every family gets it, the LoRA is then built on the quantized layers and trains in the
compute dtype. The saved LoRA holds only its own weights, so it applies to the unquantized model.

- fp8: every layer stored in float8_e4m3fn and cast to the compute dtype while it runs (the layers diffusers'
  layerwise casting casts, norms kept; the backward casts the fp8 weight again: quant/fp8_layers.py).
- int8, int4: torchao weight-only quantization of the Linear layers (int4 per group of 128 with torchao's CUDA int4
  kernels; elsewhere per group of 32, held one value a byte: int4's precision, int8's memory).
- nf4: bitsandbytes' 4-bit NormalFloat Linear layers (blocks of 64, the compute dtype for the matmul).
"""
from __future__ import annotations

import functools
from collections.abc import Callable

import torch
from torch import nn

from trainers.core.errors import ConfigError, ConfigIssue
from trainers.memory_estimate import base_precision
from trainers.core.options import TrainConfig
from trainers.quant.fp8_layers import store_in_fp8

INT4_GROUP_CUDA, INT4_GROUP = 128, 32
FP8_MIN_CAPABILITY = (8, 0)  # our line: Ampere and newer (float8 storage with bf16 compute as sd-scripts users run it)


def check_platform(cfg: TrainConfig, device: torch.device) -> None:
    """Refuse, by option name and before any model loads, a quantization this machine cannot do."""
    issues = []
    for name, mode in (("base_model_precision", base_precision(cfg.values)),
                       ("text_encoder_precision", str(cfg.values.get("text_encoder_precision") or "none"))):
        problem = platform_problem(mode, device)
        if problem:
            issues.append(ConfigIssue(name, problem, "precision"))
    if issues:
        raise ConfigError(issues)


@functools.cache
def platform_problem(mode: str, device: torch.device) -> str | None:
    """Why `mode` cannot run on `device` (None: it can), found by quantizing one small layer there."""
    if mode == "none":
        return None
    if mode == "fp8" and device.type == "cuda" and torch.cuda.get_device_capability(device) < FP8_MIN_CAPABILITY:
        major, minor = torch.cuda.get_device_capability(device)
        return (f"'fp8' needs an NVIDIA GPU of compute capability {FP8_MIN_CAPABILITY[0]}.{FP8_MIN_CAPABILITY[1]} "
                f"or newer; {torch.cuda.get_device_name(device)} is {major}.{minor}: choose 'int8' or 'nf4'")
    probe = nn.Sequential(nn.Linear(128, 128))
    try:
        quantize_frozen(probe, mode, torch.bfloat16 if device.type == "cuda" else torch.float32, device)
        probe.to(device)(torch.zeros(1, 128, device=device, dtype=torch.bfloat16 if device.type == "cuda"
                                     else torch.float32))
    except ImportError as err:
        library = "bitsandbytes" if mode == "nf4" else "torchao"
        return f"{mode!r} needs {library}, which does not import here ({err}): run setup.sh, or choose another mode"
    except Exception as err:  # noqa: BLE001 - each library fails its own way on a platform it does not support
        library = "bitsandbytes" if mode == "nf4" else "torchao" if mode in ("int8", "int4") else "PyTorch"
        return (f"{mode!r} does not run on {device.type.upper()} with this {library} build ({type(err).__name__}: "
                f"{str(err)[:200]}): choose another mode")
    return None


def quantize_frozen(module: nn.Module, mode: str, compute_dtype: torch.dtype, device: torch.device) -> None:
    """`module`'s weights stored as `mode`; its forward computes in `compute_dtype`. Its Linear layers' quantized
    weights are made on `device`."""
    if mode == "fp8":
        store_in_fp8(module, compute_dtype, *_fp8_skips(module))
        return
    module.requires_grad_(False)
    if mode == "nf4":
        _replace_linears(module, lambda linear: _nf4(linear, compute_dtype, device))
        return
    from torchao.quantization import quantize_

    config, group = _torchao_config(mode, device)
    quantize_(module, config, filter_fn=lambda m, _: isinstance(m, nn.Linear) and m.in_features % group == 0,
              device=device)


def _fp8_skips(module: nn.Module) -> tuple[tuple[str, ...], tuple[type[nn.Module], ...]]:
    """(name patterns, classes) of the layers fp8 leaves in the compute dtype, as diffusers' layerwise casting
    leaves them: a diffusers model's own skip patterns and float32 modules with diffusers' defaults."""
    kept = tuple(getattr(module, "_keep_in_fp32_modules", None) or ())
    if hasattr(module, "_skip_layerwise_casting_patterns"):  # a diffusers model knows which of its layers to skip
        from diffusers.hooks.layerwise_casting import DEFAULT_SKIP_MODULES_PATTERN

        return (*DEFAULT_SKIP_MODULES_PATTERN, *kept, *(module._skip_layerwise_casting_patterns or ())), ()
    # Embeddings by class too: T5's `shared` ties its weight to `encoder.embed_tokens`, which the name pattern
    # skips. The layers a transformers model keeps in float32 stay out as well: T5 casts the input of its `wo` to
    # that layer's weight dtype.
    return ("norm", "embed", "pos_embed", "patch_embed", *kept), (nn.Embedding,)


def _torchao_config(mode: str, device: torch.device) -> tuple[object, int]:
    """torchao's config for `mode` on `device`, and the group its Linear layers' inputs must divide into."""
    from torchao.quantization import Int8WeightOnlyConfig, IntxWeightOnlyConfig, PerGroup

    if mode == "int8":
        return Int8WeightOnlyConfig(), 1
    if mode != "int4":
        raise ValueError(f"unknown quantization {mode!r}")
    if device.type == "cuda":
        from torchao.quantization import Int4WeightOnlyConfig

        if _cuda_int4_kernels():
            return Int4WeightOnlyConfig(group_size=INT4_GROUP_CUDA), INT4_GROUP_CUDA
    return IntxWeightOnlyConfig(weight_dtype=torch.int4, granularity=PerGroup(INT4_GROUP)), INT4_GROUP


@functools.cache
def _cuda_int4_kernels() -> bool:
    """Whether torchao's packed int4 layout works here (it needs its CUDA kernels)."""
    from torchao.quantization import Int4WeightOnlyConfig, quantize_

    try:
        quantize_(nn.Sequential(nn.Linear(256, 256, dtype=torch.bfloat16)), Int4WeightOnlyConfig(group_size=128),
                  device="cuda")
    except (ImportError, RuntimeError, NotImplementedError):
        return False
    return True


def _nf4(linear: nn.Linear, compute_dtype: torch.dtype, device: torch.device) -> nn.Module:
    import bitsandbytes as bnb

    quantized = bnb.nn.Linear4bit(linear.in_features, linear.out_features, bias=linear.bias is not None,
                                  compute_dtype=compute_dtype, quant_type="nf4", device="meta")
    quantized.weight = bnb.nn.Params4bit(linear.weight.data.to("cpu", compute_dtype), requires_grad=False,
                                         quant_type="nf4", blocksize=64)
    if linear.bias is not None:
        quantized.bias = nn.Parameter(linear.bias.data, requires_grad=False)
    return quantized.to(device)  # Params4bit quantizes as it moves


def _replace_linears(module: nn.Module, make: Callable[[nn.Linear], nn.Module]) -> None:
    for name, child in module.named_children():
        if isinstance(child, nn.Linear):
            setattr(module, name, make(child))
        else:
            _replace_linears(child, make)
