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
    Option("compile_blocks", "str", "auto", "Compile each of the denoiser's repeated blocks (a transformer's blocks, "
           "a UNet's transformer blocks) with torch.compile, as diffusers' regional compilation does: one compiled "
           "block reused by all, so compiling takes seconds, not minutes. 'auto': off for now (it will turn on for CUDA "
           "runs without block swap or layer offload, fp8/nf4 base weights or DeepSpeed/FSDP once a GPU check has "
           "shown it faster; the CPU gains little and compiles slowly); 'on' always (refused with block swap or layer offload, whose weight "
           "moves cannot be compiled); 'off' never. The first step of each new image size compiles. Not with "
           "dynamo_backend, which compiles the whole model.", "precision", choices=("auto", "on", "off"),
           advanced=True),
    Option("fp8_base", "bool", False, "Keep the base model's UNet or transformer in 8-bit floats (float8_e4m3fn), "
           "each layer cast to the mixed_precision dtype while it runs (diffusers' layerwise casting): about half "
           "the memory of bf16 weights, e.g. a 12B transformer on 16-24 GB. LoRA only; needs mixed_precision. The text encoders "
           "keep their precision (sd-scripts casts them too).", "precision", methods=methods_training("network"),
           advanced=True),
    Option("blocks_to_swap", "int", None, "Keep this many of the denoiser's blocks' weights in CPU memory, each "
           "moved to the GPU only while it runs (as sd-scripts). LoRAs and full finetunes (the offloaded weights' "
           "optimizer step and states then in CPU memory). Less GPU memory, slower steps; needs "
           "gradient_checkpointing.", "precision", methods=methods_training("network") | methods_training("full"),
           min=1, nullable=True, advanced=True),
    Option("base_model_precision", "str", "none", "Store the frozen base UNet or transformer quantized, computed in "
           "the mixed_precision dtype: 'fp8' (every layer in 8-bit floats; what fp8_base turns on), 'int8' or 'int4' "
           "(torchao, weight-only, Linear layers), 'nf4' (bitsandbytes 4-bit, Linear layers). Less GPU memory, some "
           "precision lost in the base's outputs; the LoRA trains in the compute dtype and applies to the unquantized "
           "model. Validate's memory estimate shows what each saves. LoRA only.", "precision",
           methods=methods_training("network"), choices=("none", "fp8", "int8", "int4", "nf4")),
    Option("text_encoder_precision", "str", "none", "Store the frozen text encoders quantized (the choices of "
           "base_model_precision). Worth it when their outputs are not cached (T5-XXL takes 9.5 GB in bf16). LoRA only.",
           "precision", methods=methods_training("network"), choices=("none", "fp8", "int8", "int4", "nf4"),
           advanced=True),
    Option("layer_offload_fraction", "float", None, "Keep this share of the denoiser's blocks (0.5 = half; a "
           "transformer's blocks, a UNet's down, mid and up blocks) in pinned CPU memory, each copied to the GPU one "
           "block ahead on a side stream while the previous one runs (forward and backward). LoRAs and full "
           "finetunes (the offloaded weights' optimizer step and states then in CPU memory). blocks_to_swap gives a "
           "count instead. Less GPU memory, slower steps; needs gradient_checkpointing.", "precision",
           methods=methods_training("network") | methods_training("full"), min=0.0, max=0.95, nullable=True,
           advanced=True),
    Option("no_half_vae", "bool", False, "Keep the VAE in float32. On a CPU without bf16 or fp16 instructions "
           "(AVX2 only) it stays float32 anyway: half-precision convolutions run about 100x slower there.",
           "precision", advanced=True),
)
