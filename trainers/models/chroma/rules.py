"""Chroma without its weights (torch-free): its pipeline, and the options it reads (sd-scripts' FLUX.1 options with
`model_type = "chroma"`: no CLIP-L, no guidance embedding, T5's padding always masked)."""
from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from trainers.core.errors import ConfigIssue
from trainers.core.memory_facts import FLOW_AE, FLUX1_TOKENS, T5XXL, T5XXL_LINEAR, ModelSize
from trainers.core.options.training import BY_NAME
from trainers.models.flow_rules import Part
from trainers.models.flux.rules import FluxRules

GUIDANCE_PREFIXES = ("distilled_guidance_layer.", "model.diffusion_model.distilled_guidance_layer.",
                     "diffusion_model.distilled_guidance_layer.")
_GUIDANCE_DEFAULT = BY_NAME["guidance_scale"].default


class ChromaRules(FluxRules):
    name = "chroma"
    title = "Chroma"
    memory_facts = ModelSize(8_899_983_424, 8_897_888_256, T5XXL, T5XXL_LINEAR, FLOW_AE, 3_512_384, 0, 38,
                             "the published Chroma1-HD sizes", 1024 * 1024, 24.0, 2.2, tokens=FLUX1_TOKENS)
    pipeline_class = "ChromaPipeline"
    base_model_version = "chroma"  # sd-scripts' MODEL_VERSION_CHROMA (its LoRAs' ss_base_model_version)
    modelspec_architecture = "chroma"
    detect_priority = 4  # its single files have FLUX.1's double blocks too
    reference_prefixes = GUIDANCE_PREFIXES
    checkpoint_parts = (Part("t5", "text_encoders.t5xxl.transformer.", "t5xxl", "T5-XXL text encoder"),
                        Part("vae", "vae.", "ae", "autoencoder",
                             denoiser_input=("img_in.weight", 4)))

    def distilled_base(self, path: Path) -> None:
        """Chroma is not step-distilled (its distilled guidance layer computes the modulations; it samples with CFG)."""
        return None

    def option_issues(self, values: Mapping[str, Any]) -> list[ConfigIssue]:
        issues = super().option_issues(values)
        if values.get("guidance_scale") not in (None, 0, _GUIDANCE_DEFAULT):  # the default: Chroma reads none
            issues.append(ConfigIssue("guidance_scale", "Chroma has no guidance embedding: set guidance_scale = 0 "
                                      "(as sd-scripts requires for Chroma)", "flow"))
        return issues


CHROMA = ChromaRules()
