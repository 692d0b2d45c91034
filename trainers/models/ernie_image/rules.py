"""ERNIE-Image without its weights (torch-free): its pipeline and transformer classes, its published sizes, Turbo
(its distilled variant) told by its name, and the flow options it reads."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from trainers.core.memory_facts import (ERNIE_IMAGE_TOKENS, FLUX2_AE, MINISTRAL3_3B, MINISTRAL3_3B_LINEAR,
                                        ModelSize)
from trainers.models.flow_rules import FlowRules
from trainers.models.rules import DistilledBase

TRANSFORMER_CLASS = "ErnieImageTransformer2DModel"
TURBO = "ERNIE-Image-Turbo"


class ErnieImageRules(FlowRules):
    name = "ernie_image"
    title = "ERNIE-Image"
    # benchmarks/count_model_sizes.py's count on the meta device from arch/transformer.json and the published
    # text_encoder config (Mistral3Model: Ministral 3's 26-layer language model and its Pixtral vision tower); LoRA per
    # rank: the blocks' attention and MLP layers (lora_targets); activations: FLUX.1's scaled by width x blocks
    memory_facts = ModelSize(8_033_490_048, 8_032_616_448, MINISTRAL3_3B, MINISTRAL3_3B_LINEAR, FLUX2_AE, 2_949_120, 0,
                             36, "the published ERNIE-Image sizes", 1024 * 1024, 15.2, 1.4, tokens=ERNIE_IMAGE_TOKENS)
    base_model_version = "ernie_image"  # ai-toolkit's arch name (its LoRAs' ss_base_model_version)
    modelspec_architecture = "ernie-image"
    arch_dir = Path(__file__).with_name("arch")
    pipeline_class = "ErnieImagePipeline"
    # ComfyUI's diffusion_models files (the diffusers names under its prefixes): recognised and refused by name
    reference_prefixes = ("layers.0.adaLN_sa_ln.weight", "model.diffusion_model.layers.0.adaLN_sa_ln.weight",
                          "diffusion_model.layers.0.adaLN_sa_ln.weight")
    reads_single_files = False
    writes_single_files = False
    checkpoint_parts = ()
    frozen_text_encoder = "Ministral 3"

    def claims_folder(self, index: dict[str, Any], unet_config: dict[str, Any], folder: Path) -> bool:
        """ErnieImagePipeline folders, or any whose model_index.json names its transformer class."""
        return self.claims_by_pipeline_or_transformer(index, TRANSFORMER_CLASS)

    def distilled_base(self, path: Path) -> DistilledBase | None:
        """ERNIE-Image-Turbo (distilled from ERNIE-Image, 8 steps without CFG), told by its folder's name (a hub
        id's cache folder keeps it: models--baidu--ERNIE-Image-Turbo): its published configs are not known to differ
        from ERNIE-Image's. No training adapter is published for it."""
        names = [path.name, path.parent.parent.name if path.parent.name == "snapshots" else ""]
        if not any("turbo" in name.lower() for name in names):
            return None
        return DistilledBase(TURBO, "its folder's name says Turbo", "",
                             "train on ERNIE-Image (baidu/ERNIE-Image) and render the LoRA on Turbo at its 8 steps, or "
                             "set training_adapter to a de-distillation LoRA of Turbo if you have one")


ERNIE_IMAGE = ErnieImageRules()
