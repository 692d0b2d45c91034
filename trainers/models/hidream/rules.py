"""HiDream-I1 without its weights (torch-free): its pipeline, its published sizes, which of Full, Dev and Fast a
folder is (their scheduler configs alone tell them apart: the three publish the same transformer config), and the
flow options it reads."""
from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from trainers.core.errors import ConfigIssue
from trainers.core.memory_facts import (CLIP_G_248, CLIP_G_248_LINEAR, CLIP_L_248, CLIP_L_248_LINEAR, FLOW_AE,
                                     LLAMA31_8B, LLAMA31_8B_LINEAR, T5XXL, T5XXL_LINEAR, ModelSize)
from trainers.models.flow_rules import FlowRules
from trainers.models.rules import DistilledBase, json_or_empty

# the published scheduler configs: Full's UniPCMultistepScheduler (flow sigmas, flow_shift 3.0; 50 steps, CFG 5),
# Dev's and Fast's FlowMatchEulerDiscreteScheduler (shift 6.0, 28 steps; shift 3.0, 16 steps; both without CFG)
VARIANT_SHIFTS = {"full": 3.0, "dev": 6.0, "fast": 3.0}
VARIANT_TITLES = {"full": "HiDream-I1 Full", "dev": "HiDream-I1 Dev", "fast": "HiDream-I1 Fast"}
VARIANT_STEPS = {"full": 50, "dev": 28, "fast": 16}


def variant_of(scheduler_config: dict[str, Any]) -> str:
    """"full", "dev" or "fast" from a folder's scheduler config: Full samples with UniPC (its guidance-free
    distillations Dev and Fast with flow-matching Euler, shifted by 6 and 3)."""
    if scheduler_config.get("_class_name", "UniPCMultistepScheduler") != "FlowMatchEulerDiscreteScheduler":
        return "full"
    return "dev" if float(scheduler_config.get("shift", 1.0)) > VARIANT_SHIFTS["fast"] else "fast"


class HiDreamRules(FlowRules):
    name = "hidream"
    title = "HiDream-I1"
    # benchmarks-style count on the meta device from arch/transformer.json (diffusers 0.42.1); LoRA per rank: every
    # Linear of the blocks (the MoE experts included); activations: FLUX.1's scaled by width x block-streams, to
    # calibrate
    memory_facts = ModelSize(17_105_733_184, 17_103_257_600, CLIP_L_248 + CLIP_G_248 + T5XXL + LLAMA31_8B,
                             CLIP_L_248_LINEAR + CLIP_G_248_LINEAR + T5XXL_LINEAR + LLAMA31_8B_LINEAR, FLOW_AE,
                             9_211_904, 0, 48, "the published HiDream-I1 sizes", 1024 * 1024, 26.0, 2.4)
    base_model_version = "hidream_i1"
    modelspec_architecture = "hidream-i1"
    arch_dir = Path(__file__).with_name("arch")
    pipeline_class = "HiDreamImagePipeline"
    # ComfyUI's diffusion_models files (the published names): recognised and refused by name (read as folders)
    reference_prefixes = ("double_stream_blocks.0.block.ff_i.gate.weight",
                          "model.diffusion_model.double_stream_blocks.0.block.ff_i.gate.weight",
                          "diffusion_model.double_stream_blocks.0.block.ff_i.gate.weight")
    reads_single_files = False
    writes_single_files = False
    checkpoint_parts = ()
    frozen_text_encoder = "CLIP-L, CLIP-G, T5-XXL and Llama 3.1"

    def option_issues(self, values: Mapping[str, Any]) -> list[ConfigIssue]:
        """Its text encoders stay frozen: a LoRA that would train its CLIPs is refused by name (diffusers'
        HiDreamImagePipeline loads LoRAs into the transformer only; ai-toolkit and SimpleTuner train that alone)."""
        issues = super().option_issues(values)
        if values.get("network_train_unet_only", True) is False:
            issues.append(ConfigIssue("network_train_unet_only", f"{self.title}'s {self.frozen_text_encoder} text "
                                      "encoders are never trained (only the transformer's LoRA is, as in ai-toolkit "
                                      "and SimpleTuner): set it to true", "network"))
        return issues + _size_budget_issues(values, self.title)

    def distilled_base(self, path: Path) -> DistilledBase | None:
        """Dev and Fast (guidance-distilled from Full), told by their scheduler config only (see variant_of)."""
        config = json_or_empty(path / "scheduler" / "scheduler_config.json") if path.is_dir() else {}
        if not config or (variant := variant_of(config)) == "full":
            return None
        return DistilledBase(VARIANT_TITLES[variant], f"its scheduler is FlowMatchEulerDiscreteScheduler with shift "
                             f"{VARIANT_SHIFTS[variant]:g}, where HiDream-I1 Full's is UniPC (the three publish the "
                             "same transformer config)",
                             without="train on HiDream-I1 Full (HiDream-ai/HiDream-I1-Full) and apply the LoRA to "
                             f"{VARIANT_TITLES[variant]}")


def _size_budget_issues(values: Mapping[str, Any], title: str) -> list[ConfigIssue]:
    """Non-square images above its token budget, refused by name: the transformer pads non-square latents to
    max_resolution's 128 x 128 (4096 tokens, 1024 x 1024 px) and cannot hold more (square ones are not padded)."""
    sides = [p.strip() for p in str(values.get("resolution", "")).replace("x", ",").split(",")]
    if not all(p.isdigit() for p in sides):
        return []
    width, height = int(sides[0]), int(sides[-1])
    if width * height <= BUDGET_PIXELS or (width == height and not values.get("enable_bucket")):
        return []
    which = "its aspect-ratio buckets" if width == height else "its non-square size"
    return [ConfigIssue("resolution", f"{title} pads non-square images to its 1024 x 1024 token budget: "
                        f"{which} above that area cannot be trained (use a resolution of at most 1024, or square "
                        "images without buckets)", "dataset")]


BUDGET_PIXELS = 1024 * 1024  # max_resolution's 128 x 128 latents, 8 px each

HIDREAM = HiDreamRules()
