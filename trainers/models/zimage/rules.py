"""Z-Image without its weights (torch-free): its pipeline, and the flow options it reads (musubi-tuner's names and
meanings for Z-Image: timestep_sampling, discrete_flow_shift, weighting_scheme; no guidance embedding)."""
from __future__ import annotations

from pathlib import Path

from trainers.models.flow_rules import FlowRules


class ZImageRules(FlowRules):
    name = "zimage"
    title = "Z-Image"
    arch_dir = Path(__file__).with_name("arch")  # none: diffusers folders carry their configs
    pipeline_class = "ZImagePipeline"
    base_model_version = "z_image"  # musubi-tuner's ss_base_model_version (ARCHITECTURE_Z_IMAGE_FULL)
    modelspec_architecture = "Z-Image"
    frozen_text_encoder = "Qwen3"
    own_options = frozenset({"timestep_sampling", "sigmoid_scale", "discrete_flow_shift", "weighting_scheme",
                             "logit_mean", "logit_std", "mode_scale", "text_encoder_batch_size"})
    # ComfyUI's single files (NextDiT names): recognised and refused by name until they are read
    reference_prefixes = ("context_refiner.", "model.diffusion_model.context_refiner.",
                          "diffusion_model.context_refiner.")
    reads_single_files = False
    checkpoint_parts = ()


ZIMAGE = ZImageRules()
