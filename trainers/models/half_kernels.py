"""Whether this CPU has native half-precision kernels: where it has not, the VAE runs in fp32 (training and
Generate alike)."""
from __future__ import annotations

import torch


def slow_half_convolutions(device: torch.device, dtype: torch.dtype) -> bool:
    """A CPU without half-precision instructions (AVX2 only: no AVX512-BF16, AVX512-FP16 or AMX) runs a bf16 or fp16
    convolution through oneDNN's reference kernels: measured 100x slower than fp32 on a VAE's full-size layers. The
    VAE then stays fp32 there (its latents only gain precision); a GPU, or a CPU with the instructions, is as before."""
    return device.type == "cpu" and dtype in (torch.bfloat16, torch.float16) and not cpu_half_kernels(dtype)


def cpu_half_kernels(dtype: torch.dtype) -> bool:
    """Whether oneDNN has native kernels for `dtype` (bf16 or fp16) on this CPU."""
    probe = "_is_mkldnn_bf16_supported" if dtype == torch.bfloat16 else "_is_mkldnn_fp16_supported"
    try:
        return bool(getattr(torch.ops.mkldnn, probe)())
    except (AttributeError, RuntimeError):  # a torch without the probe: assume the instructions are there
        return True
