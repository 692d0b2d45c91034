"""The published sizes of each family's models (torch-free), for a memory estimate when the model is not on this
machine (a hub id, a preset): counted on the `meta` device from the published configs with diffusers 0.42.1.

A new family adds its line here; without one its estimate needs a local model (its safetensors headers).
"""
from __future__ import annotations

from dataclasses import dataclass

CLIP_L, CLIP_G, T5XXL = 123_060_480, 694_659_840, 4_762_310_656  # text encoders' parameters
CLIP_L_LINEAR, CLIP_G_LINEAR, T5XXL_LINEAR = 84_934_656, 629_145_600, 4_630_511_616  # in their Linear weights
CLIP_L_LORA, CLIP_G_LORA = 165_888, 737_280  # LoRA parameters per rank on their attention and MLP layers
SD_VAE, FLOW_AE = 83_653_863, 83_819_683


@dataclass(frozen=True)
class ModelSize:
    """What a memory estimate needs of a model; counted from its files, or published."""

    denoiser: int  # parameters of the UNet or transformer
    denoiser_linear: int  # of them in Linear weights: what int8, int4 and nf4 quantize
    text_encoders: int
    text_encoders_linear: int
    vae: int
    lora_per_rank: int  # LoRA parameters per unit of network_dim on the denoiser's default targets
    text_lora_per_rank: int  # and on the text encoders' (attention and MLP layers)
    swap_units: int  # what blocks_to_swap counts (two FLUX single blocks count as one)
    source: str  # where the numbers come from, for the message
    native_pixels: int = 1024 * 1024  # the resolution the activation figures below are for
    # Activations of one sample at native_pixels in a 16-bit dtype, in GB: roughly, with and without gradient
    # checkpointing (SDPA attention: linear in the pixel count). Calibrate with benchmarks/memory_benchmark.py on a GPU.
    activations_gb: float = 0.0
    activations_checkpointed_gb: float = 0.0


PUBLISHED: dict[str, ModelSize] = {
    "sd1": ModelSize(859_520_964, 270_049_280, CLIP_L, CLIP_L_LINEAR, SD_VAE, 374_016, CLIP_L_LORA, 0,
                     "the published SD1.5 sizes", 512 * 512, 2.6, 0.6),
    "sd2": ModelSize(865_910_724, 272_000_000, 340_387_840, 289_406_976, SD_VAE, 374_016, 423_936, 0,
                     "the published SD2.1 sizes", 768 * 768, 5.0, 1.0),
    "sdxl": ModelSize(2_567_463_684, 2_232_647_680, CLIP_L + CLIP_G, CLIP_L_LINEAR + CLIP_G_LINEAR, SD_VAE, 2_659_840,
                      CLIP_L_LORA + CLIP_G_LORA, 0, "the published SDXL 1.0 sizes", 1024 * 1024, 9.0, 1.6),
    "sd3": ModelSize(2_243_171_520, 2_241_822_720, CLIP_L + CLIP_G + T5XXL,
                     CLIP_L_LINEAR + CLIP_G_LINEAR + T5XXL_LINEAR, FLOW_AE, 2_038_272, CLIP_L_LORA + CLIP_G_LORA, 24,
                     "the published SD3.5 Medium sizes", 1024 * 1024, 8.0, 1.2),
    "flux": ModelSize(11_891_178_560, 11_888_099_328, CLIP_L + T5XXL, CLIP_L_LINEAR + T5XXL_LINEAR, FLOW_AE,
                      5_369_856, CLIP_L_LORA, 38, "the published FLUX.1 dev sizes", 1024 * 1024, 24.0, 2.2),
}
