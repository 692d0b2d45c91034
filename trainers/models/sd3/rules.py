"""SD3 and SD3.5 without their weights (torch-free): their pipeline, Stability's single-file layout and the parts it
may lack (clip_l, clip_g, t5xxl), and the options they do not take."""
from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from trainers.core.errors import ConfigIssue
from trainers.core.memory_facts import (CLIP_G, CLIP_G_LINEAR, CLIP_G_LORA, CLIP_L, CLIP_L_LINEAR, CLIP_L_LORA, FLOW_AE,
                                        T5XXL, T5XXL_LINEAR, ModelSize)
from trainers.models.flow_rules import FlowRules, Part


class StableDiffusion3Rules(FlowRules):
    name = "sd3"
    title = "SD3"
    memory_facts = ModelSize(2_243_171_520, 2_241_822_720, CLIP_L + CLIP_G + T5XXL,
                             CLIP_L_LINEAR + CLIP_G_LINEAR + T5XXL_LINEAR, FLOW_AE, 2_038_272,
                             CLIP_L_LORA + CLIP_G_LORA, 24, "the published SD3.5 Medium sizes", 1024 * 1024, 8.0, 1.2)
    arch_dir = Path(__file__).with_name("arch")  # none: a single file's config is read from its shapes
    pipeline_class = "StableDiffusion3Pipeline"
    reference_prefixes = ("joint_blocks.", "model.diffusion_model.joint_blocks.")
    checkpoint_parts = (
        Part("clip_l", "text_encoders.clip_l.transformer.", "clip_l", "CLIP-L text encoder", projection=True),
        Part("clip_g", "text_encoders.clip_g.transformer.", "clip_g", "CLIP-G text encoder", projection=True),
        Part("t5", "text_encoders.t5xxl.transformer.", "t5xxl", "T5-XXL text encoder"),
        Part("vae", "first_stage_model.", "", "VAE", denoiser_input=("x_embedder.proj.weight", 1)))

    def option_issues(self, values: Mapping[str, Any]) -> list[ConfigIssue]:
        issues = super().option_issues(values)
        for name in ("ip_noise_gamma", "ip_noise_gamma_random_strength"):
            if values.get(name):
                issues.append(ConfigIssue(name, "is not used with SD3 models (as in sd-scripts): turn it off", "loss"))
        return issues


SD3 = StableDiffusion3Rules()
