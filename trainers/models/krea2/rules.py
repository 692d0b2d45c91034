"""Krea 2 without its weights (torch-free): its pipeline (Krea2Pipeline), and the flow options it reads (musubi-tuner's
names and meanings for Krea 2: timestep_sampling 'krea2_shift', discrete_flow_shift, weighting_scheme; no guidance
embedding)."""
from __future__ import annotations

from pathlib import Path

from trainers.core.memory_facts import QWEN3_VL_4B, QWEN3_VL_4B_LINEAR, QWEN_IMAGE_VAE, ModelSize
from trainers.models.flow_rules import FlowRules
from trainers.models.rules import DistilledBase, json_or_empty

TURBO_ADAPTER = "ostris/krea2_turbo_training_adapter (krea2_turbo_training_adapter_v1.safetensors)"


class Krea2Rules(FlowRules):
    name = "krea2"
    title = "Krea 2"
    # diffusers' class defaults (no published diffusers folder to check them by); activations: FLUX.1's scaled
    memory_facts = ModelSize(12_820_073_036, 12_818_579_468, QWEN3_VL_4B, QWEN3_VL_4B_LINEAR, QWEN_IMAGE_VAE,
                             3_665_805, 0, 28, "Krea 2's sizes in diffusers", 1024 * 1024, 17.7, 1.6)
    arch_dir = Path(__file__).with_name("arch")  # none: diffusers folders carry their configs
    pipeline_class = "Krea2Pipeline"
    base_model_version = "krea2"  # musubi-tuner's ss_base_model_version (ARCHITECTURE_KREA2_FULL)
    modelspec_architecture = "Krea-2"
    # the reference (krea-ai/krea-2, ComfyUI) single files: recognised and refused by name
    reference_prefixes = ("txtfusion.", "model.diffusion_model.txtfusion.", "diffusion_model.txtfusion.")
    reads_single_files = False
    writes_single_files = False
    checkpoint_parts = ()

    def distilled_base(self, path: Path) -> DistilledBase | None:
        """Krea 2 Turbo: its model_index.json has is_distilled true (Krea 2 Raw's has not)."""
        index = json_or_empty(path / "model_index.json") if path.is_dir() else {}
        if not index.get("is_distilled"):
            return None
        return DistilledBase("Krea 2 Turbo", "its model_index.json has is_distilled true", TURBO_ADAPTER)


KREA2 = Krea2Rules()
