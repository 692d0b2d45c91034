"""ERNIE-Image without its weights (torch-free): its pipeline and transformer classes, its published sizes, Turbo
(its distilled variant) told by its name, the flow options it reads, and the parts of its single files."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from trainers.core.errors import ConfigIssue
from trainers.core.memory_facts import (ERNIE_IMAGE_TOKENS, FLUX2_AE, MINISTRAL3_3B, MINISTRAL3_3B_LINEAR,
                                        ModelSize)
from trainers.models.flow_rules import FlowRules, Part
from trainers.models.rules import CheckpointKeys, DistilledBase, ModelFiles

TRANSFORMER_CLASS = "ErnieImageTransformer2DModel"
TURBO = "ERNIE-Image-Turbo"
# FLUX.2's autoencoder in Black Forest Labs' layout (ERNIE-Image's and Ideogram 4's `ae`)
FLUX2_AE_PART = Part("vae", "vae.", "ae", "FLUX.2 autoencoder (ComfyUI's vae/flux2-vae.safetensors)",
                reader="trainers.models.ernie_image.flux2_autoencoder", latent_channels=32,
                file_keys=(("encoder.conv_in.weight",), ("decoder.conv_in.weight",), ("bn.running_mean",)))
# ComfyUI's split files beside its diffusion_models file: Ministral 3's language model as ComfyUI reads it (a
# MistralModel: no vision tower, plain rope), FLUX.2's autoencoder; the tokenizer from the hub or tokenizer_cache_dir
SPLIT_PARTS = (Part("llm", "text_encoders.ministral3_3b.", "text_encoder", "Ministral 3 text encoder (ComfyUI's "
                    "text_encoders Ministral 3 3B file)", encoder_class="MistralModel",
                    base_config=Path(__file__).with_name("text_encoder.json"), tokenizer="baidu/ERNIE-Image",
                    tokenizer_subfolder="tokenizer", reader="trainers.models.ernie_image.text_encoder"),
               replace(FLUX2_AE_PART, denoiser_input=("x_embedder.proj.weight", 4)))


def single_file_issues(rules: FlowRules, keys: CheckpointKeys, files: ModelFiles, vae_path: str) -> list[ConfigIssue]:
    """The parts a single file lacks; a `vae` folder is refused by name: the single-file loader reads a vae folder as
    an AutoencoderKL, which FLUX.2's autoencoder (its batch norm) is not."""
    if vae_path:
        return [ConfigIssue("vae", f"{rules.title} single files read FLUX.2's autoencoder from the ae option "
                            "(vae/flux2-vae.safetensors): leave vae empty and set ae", "model")]
    return FlowRules.checkpoint_issues(rules, keys, files, vae_path)


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
    # ComfyUI's diffusion_models files (the diffusers names, bare or under its prefixes; reference.py), read with
    # ComfyUI's split files beside; finetunes are written so too (the transformer alone)
    reference_prefixes = ("layers.0.adaLN_sa_ln.weight", "model.diffusion_model.layers.0.adaLN_sa_ln.weight",
                          "diffusion_model.layers.0.adaLN_sa_ln.weight")
    checkpoint_parts = SPLIT_PARTS
    frozen_text_encoder = "Ministral 3"

    def checkpoint_issues(self, keys: CheckpointKeys, files: ModelFiles, vae_path: str = "") -> list[ConfigIssue]:
        return single_file_issues(self, keys, files, vae_path)

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
