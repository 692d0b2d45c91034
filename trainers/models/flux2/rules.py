"""FLUX.2 without its weights (torch-free): its two pipelines (dev: Flux2Pipeline; klein 4B/9B: Flux2KleinPipeline),
and the flow options it reads (musubi-tuner's names and meanings for FLUX.2: timestep_sampling 'flux2_shift',
discrete_flow_shift, weighting_scheme; the guidance embedding's value for dev)."""
from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from trainers.core.errors import ConfigIssue
from trainers.core.memory_facts import (FLUX2_AE, FLUX2_DEV_TOKENS, FLUX2_KLEIN4_TOKENS, FLUX2_KLEIN9_TOKENS,
                                        MISTRAL3_24B, MISTRAL3_24B_LINEAR, QWEN3_4B, QWEN3_4B_LM_LINEAR, QWEN3_8B,
                                        QWEN3_8B_LINEAR, ModelSize)
from trainers.models.edit_rules import EditRules
from trainers.models.flow_rules import FlowRules
from trainers.models.rules import DistilledBase, json_or_empty

PIPELINES = ("Flux2Pipeline", "Flux2KleinPipeline")  # dev, klein
# klein's published sizes (benchmarks/count_model_sizes.py), told apart by the words of a hub id; activations from
# their sequences (the figures: FLUX.1's scaled by width x block-streams, for a model from its files)
KLEIN_MEMORY_FACTS = {
    ("klein", "9b"): ModelSize(9_078_581_248, 9_078_571_008, QWEN3_8B, QWEN3_8B_LINEAR, FLUX2_AE, 2_588_672, 0, 20,
                               "the published FLUX.2 klein 9B sizes", 1024 * 1024, 16.8, 1.5,
                               tokens=FLUX2_KLEIN9_TOKENS),
    ("klein",): ModelSize(3_875_544_576, 3_875_536_896, QWEN3_4B, QWEN3_4B_LM_LINEAR, FLUX2_AE, 1_443_840, 0, 15,
                          "the published FLUX.2 klein 4B sizes", 1024 * 1024, 9.5, 0.9, tokens=FLUX2_KLEIN4_TOKENS)}


class Flux2Rules(EditRules, FlowRules):
    name = "flux2"
    title = "FLUX.2"
    # An edit run when the dataset names control images (as Flux2Pipeline and Flux2KleinPipeline take `image=`); up
    # to 3 references per target, the edit-pair datasets' limit (musubi-tuner takes any number)
    controls_optional = True
    max_controls = 3
    memory_facts = ModelSize(32_223_281_152, 32_223_264_768, MISTRAL3_24B, MISTRAL3_24B_LINEAR, FLUX2_AE, 6_094_848, 0,
                             32, "the published FLUX.2 dev sizes", 1024 * 1024, 40.4, 3.7, tokens=FLUX2_DEV_TOKENS)
    memory_variants = KLEIN_MEMORY_FACTS
    arch_dir = Path(__file__).with_name("arch")  # none: diffusers folders carry their configs
    pipeline_class = PIPELINES[0]
    base_model_version = "flux_2_dev"  # musubi-tuner's ss_base_model_version (ARCHITECTURE_FLUX_2_DEV_FULL)
    modelspec_architecture = "Flux.2-dev"  # musubi-tuner's ARCH_FLUX_2_DEV
    variant_versions = ("flux_2_klein_4b", "flux_2_klein_9b")  # the klein LoRAs' ss_base_model_version (Browse)
    # BFL's single files (flux2-dev.safetensors, flux2-klein-*.safetensors): recognised and refused by name
    reference_prefixes = ("double_stream_modulation_img.", "model.diffusion_model.double_stream_modulation_img.",
                          "diffusion_model.double_stream_modulation_img.")
    reads_single_files = False
    checkpoint_parts = ()

    def claims_folder(self, index: dict[str, Any], unet_config: dict[str, Any], folder: Path) -> bool:
        return str(index.get("_class_name", "")) in PIPELINES

    def distilled_base(self, path: Path) -> DistilledBase | None:
        """klein's distilled checkpoints (Flux2KleinPipeline with is_distilled true); its base ones are not. BFL
        publishes no training adapter for them: peers (ai-toolkit, musubi-tuner) train the klein base models."""
        index = json_or_empty(path / "model_index.json") if path.is_dir() else {}
        if index.get("_class_name") != PIPELINES[1] or not index.get("is_distilled"):
            return None
        return DistilledBase("FLUX.2 klein (distilled)", "its model_index.json has is_distilled true", "",
                             "train the klein base model of the same size (black-forest-labs/FLUX.2-klein-base-4B or "
                             "-9B), as ai-toolkit and musubi-tuner do, and render its LoRA on the distilled model")

    def option_issues(self, values: Mapping[str, Any]) -> list[ConfigIssue]:
        issues = super().option_issues(values)
        if values.get("timestep_sampling") == "flux_shift":
            issues.append(ConfigIssue("timestep_sampling", "'flux_shift' counts FLUX.1's tokens; FLUX.2 models "
                                      "shift by their own token count with 'flux2_shift' (musubi-tuner's name)",
                                      "flow"))
        return issues


FLUX2 = Flux2Rules()
