"""Qwen-Image 2.1 without its weights (torch-free): its pipeline, and the flow options it reads (Qwen-Image's:
timestep_sampling with 'qwen_shift', discrete_flow_shift, weighting_scheme; no guidance embedding)."""
from __future__ import annotations

from trainers.models.qwen_image.rules import QwenImageRules


class QwenImage21Rules(QwenImageRules):
    name = "qwen_image21"
    title = "Qwen-Image 2.1"
    base_model_version = "qwen_image_21"  # no trainer names it yet: Qwen-Image's, with the version
    modelspec_architecture = "Qwen-Image-2.1"
    pipeline_class = "QwenImage21Pipeline"
    frozen_text_encoder = "Qwen3-VL"
    # its transformer's shared modulation (Qwen-Image's blocks have their own): recognised, refused by name
    reference_prefixes = ("modulation.1.", "model.diffusion_model.modulation.1.", "diffusion_model.modulation.1.")
    writes_single_files = False  # no tool reads a single-file Qwen-Image 2.1 yet: finetunes are diffusers folders


QWEN_IMAGE21 = QwenImage21Rules()
