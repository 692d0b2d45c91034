"""Options: Precision and memory."""
from __future__ import annotations

from trainers.core.options.schema import Option
from trainers.core.registry import methods_training

OPTIONS: tuple[Option, ...] = (
    Option("mixed_precision", "str", "no", "Compute precision: bf16 on recent GPUs, fp16 on older ones.",
           "precision", choices=("no", "fp16", "bf16")),
    Option("full_bf16", "bool", False, "Keep trained weights and gradients in bf16 too (less memory; needs "
           "mixed_precision = bf16).", "precision", advanced=True),
    Option("gradient_checkpointing", "bool", False, "Recompute activations in the backward pass: much less "
           "memory, about 20% slower.", "precision"),
    Option("sdpa", "bool", True, "Use PyTorch scaled-dot-product attention (fast, memory-efficient).",
           "precision", advanced=True),
    Option("fp8_base", "bool", False, "Keep the base model's UNet or transformer in 8-bit floats (float8_e4m3fn), "
           "each layer cast to the mixed_precision dtype while it runs (diffusers' layerwise casting): about half "
           "the memory of bf16 weights, e.g. FLUX.1 on 16-24 GB. LoRA only; needs mixed_precision. The text encoders "
           "keep their precision (sd-scripts casts them too).", "precision", methods=methods_training("network"),
           advanced=True),
    Option("blocks_to_swap", "int", None, "SD3 and FLUX LoRAs: keep this many transformer blocks' weights in CPU "
           "memory, each moved to the GPU only while it runs (as sd-scripts; FLUX counts a double block as two "
           "single ones). Less GPU memory, slower steps; needs gradient_checkpointing.", "precision",
           methods=methods_training("network"), min=1, nullable=True, advanced=True),
    Option("no_half_vae", "bool", False, "Keep the VAE in float32 (SDXL's VAE overflows in fp16 and always "
           "stays float32 under fp16).", "precision", advanced=True),
)
