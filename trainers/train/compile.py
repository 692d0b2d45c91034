"""compile_blocks: regional torch.compile of the denoiser, as diffusers' compile_repeated_blocks does it.

Each repeated block (ModelFamily.repeated_blocks) gets `module.compile()`; blocks of one class share their code, and
torch's inlined nn.Module tracing makes their weights inputs of the graph, so the first block's compile serves the
others and compiling takes seconds instead of the minutes a whole-model compile (dynamo_backend) takes. The
decision is torch-free (compile_wanted) so Validate can say it; the checks are in trainers/quant/rules.py.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from torch import nn

# With these the blocks' weights move or are cast by hooks that dynamo cannot compile (or was not checked with).
_OFFLOAD = ("blocks_to_swap", "layer_offload_fraction")
# 'auto' compiles on CUDA only once benchmarks/gpu_check.py (sdxl-lora-bs1 against sdxl-lora-bs1-compiled) has shown
# it faster on a card: no GPU has run it yet, and each new bucket size recompiles (dynamo's recompile limit is 8).
AUTO_ON_CUDA = False


def compile_wanted(values: Mapping[str, Any], device_type: str) -> bool:
    """Whether compile_blocks compiles on `device_type` ('cuda', 'cpu', ...) with these option values."""
    mode = str(values.get("compile_blocks") or "auto")
    if mode != "auto":
        return mode == "on"
    return (AUTO_ON_CUDA and device_type == "cuda" and not any(values.get(name) for name in _OFFLOAD)
            and not values.get("fp8_base") and str(values.get("base_model_precision") or "none") not in ("fp8", "nf4")
            and str(values.get("distributed_backend") or "ddp") == "ddp"
            and str(values.get("dynamo_backend") or "no") == "no")


def compile_blocks(family: Any, denoiser: nn.Module, values: Mapping[str, Any], device_type: str,
                   backend: str = "inductor") -> list[nn.Module]:
    """Compile the denoiser's repeated blocks when compile_wanted says so; the blocks compiled (none: not compiled).
    The compile itself happens on each block's first call, so a LoRA applied after this is part of it."""
    if not compile_wanted(values, device_type):
        return []
    blocks = family.repeated_blocks(denoiser)
    for block in blocks:
        block.compile(backend=backend)
    return blocks


def is_compiled(module: nn.Module) -> bool:
    """Whether `module` runs compiled (nn.Module.compile sets _compiled_call_impl)."""
    return getattr(module, "_compiled_call_impl", None) is not None
