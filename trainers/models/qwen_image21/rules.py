"""Qwen-Image 2.1 without its weights (torch-free): its pipeline, and the flow options it reads (Qwen-Image's:
timestep_sampling with 'qwen_shift', discrete_flow_shift, weighting_scheme; no guidance embedding)."""
from __future__ import annotations

from trainers.core.memory_facts import QWEN3_VL_8B, QWEN3_VL_8B_LINEAR, QWEN_IMAGE21_VAE, ModelSize
from trainers.models.qwen_image.rules import QwenImageRules


class QwenImage21Rules(QwenImageRules):
    name = "qwen_image21"
    title = "Qwen-Image 2.1"
    # diffusers' class defaults (no second published config to check them by); activations: FLUX.1's scaled
    memory_facts = ModelSize(7_115_124_736, 7_115_112_448, QWEN3_VL_8B, QWEN3_VL_8B_LINEAR, QWEN_IMAGE21_VAE,
                             2_621_440, 0, 32, "Qwen-Image 2.1's sizes in diffusers", 1024 * 1024, 13.5, 1.2)
    base_model_version = "qwen_image_21"  # no trainer names it yet: Qwen-Image's, with the version
    modelspec_architecture = "Qwen-Image-2.1"
    pipeline_class = "QwenImage21Pipeline"
    frozen_text_encoder = "Qwen3-VL"
    # its transformer's shared modulation (Qwen-Image's blocks have their own): recognised, refused by name
    reference_prefixes = ("modulation.1.", "model.diffusion_model.modulation.1.", "diffusion_model.modulation.1.")
    reads_single_files = False
    writes_single_files = False  # no tool reads a single-file Qwen-Image 2.1 yet: finetunes are diffusers folders
    checkpoint_parts = ()


QWEN_IMAGE21 = QwenImage21Rules()
