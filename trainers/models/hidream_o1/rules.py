"""HiDream-O1-Image without its weights (torch-free): its single files (Comfy-Org's checkpoints/
hidream_o1_image_bf16.safetensors and HiDream-ai's own `model.`-named weights, as musubi-tuner reads them), its
published sizes, the Dev variant (distilled) told by the file's name, and what it cannot honour."""
from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from trainers.core.errors import ConfigIssue
from trainers.core.memory_facts import HIDREAM_O1_TOKENS, ModelSize
from trainers.models.flow_rules import FlowRules
from trainers.models.rules import CheckpointKeys, DistilledBase, ModelFiles

# where a file nests the model: Comfy-Org's (none), HiDream-ai's and musubi-tuner's saves (`model.`), ComfyUI's
ROOTS = ("", "model.", "diffusion_model.", "model.diffusion_model.")
MARKER = "final_layer2.linear."  # HiDream-O1's pixel output head, which no other family's file has
PATCH_MARKER = "x_embedder.proj1."
REPOSITORIES = {"full": "HiDream-ai/HiDream-O1-Image", "dev": "HiDream-ai/HiDream-O1-Image-Dev"}
DEV = "HiDream-O1-Image-Dev"
SIZE_STEP = 32  # one image token covers 32 x 32 pixels


class HiDreamO1Rules(FlowRules):
    name = "hidream_o1"
    title = "HiDream-O1-Image"
    # counted on the meta device from arch/config.json (Qwen3-VL 8B's decoder and vision tower without the deepstack
    # mergers, the pixel heads); LoRA per rank: networks.lora_hidream_o1's t2i targets (every decoder layer's
    # attention and MLP, x_embedder, final_layer2); no VAE and no separate text encoder
    memory_facts = ModelSize(8_062_180_080, 7_434_694_656, 0, 0, 0, 2_744_320, 0, 36,
                             "the published HiDream-O1-Image sizes", 1024 * 1024, tokens=HIDREAM_O1_TOKENS)
    base_model_version = "hidream_o1"  # musubi-tuner's ARCHITECTURE_HIDREAM_O1_FULL
    modelspec_architecture = "hidream-o1"
    arch_dir = Path(__file__).with_name("arch")
    # diffusers 0.42.1 has none (a later diffusers adds a modular HiDreamO1ModularPipeline): no folder is claimed
    pipeline_class = "HiDreamO1ModularPipeline"
    detect_priority = 4
    writes_single_files = True
    size_step, size_reason = SIZE_STEP, "one image token is a 32x32 pixel patch"
    reference_prefixes = tuple(f"{root}{MARKER}" for root in ROOTS)
    checkpoint_parts = ()  # one file holds it all: the decoder is its text encoder, and it has no autoencoder

    def claims_checkpoint(self, keys: CheckpointKeys) -> bool:
        return any(keys.has(f"{root}{MARKER}") and keys.has(f"{root}{PATCH_MARKER}") for root in ROOTS)

    def checkpoint_issues(self, keys: CheckpointKeys, files: ModelFiles, vae_path: str = "") -> list[ConfigIssue]:
        return []

    def distilled_base(self, path: Path) -> DistilledBase | None:
        if "dev" not in path.name.lower().replace("-", "_").split("_"):
            return None
        return DistilledBase(DEV, f"its file name ({path.name}) says Dev",
                             without="set model_type = 'dev' (its noise settings and samples, as musubi-tuner "
                                     "trains it), or train HiDream-O1-Image (hidream_o1_image_bf16.safetensors)")

    def tells_distilled(self, path: Path) -> bool:
        return True

    def option_issues(self, values: Mapping[str, Any]) -> list[ConfigIssue]:
        issues = super().option_issues(values)
        for name in ("vae", "ae", "text_encoder"):
            if values.get(name):
                issues.append(ConfigIssue(name, f"{self.title} has no autoencoder or separate text encoder (it "
                                          "denoises pixels, its Qwen3-VL decoder reads the caption): leave it "
                                          "empty", "model"))
        if values.get("save_diffusers_lora"):
            issues.append(ConfigIssue("save_diffusers_lora", "diffusers has no HiDream-O1 DiffusionPipeline; its "
                                      "kohya files are what ComfyUI and musubi-tuner read: leave it off", "network"))
        if values.get("weighting_scheme", "none") not in ("none", "uniform"):
            issues.append(ConfigIssue("weighting_scheme", f"{self.title} trains with weighting_scheme 'none' only "
                                      "(as musubi-tuner)", "flow"))
        return issues

    def training_issues(self, trains: str, values: Mapping[str, Any]) -> list[ConfigIssue]:
        """A finetune is saved as the single file: diffusers has no HiDream-O1 pipeline that loads a folder."""
        if trains == "full" and values.get("save_model_as", "diffusers") != "safetensors":
            return [ConfigIssue("save_model_as", f"{self.title} finetunes are saved as one .safetensors file in "
                                "Comfy-Org's layout (what ComfyUI and musubi-tuner read): set save_model_as = "
                                "'safetensors'", "saving")]
        return []


HIDREAM_O1 = HiDreamO1Rules()
