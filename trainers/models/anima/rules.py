"""Anima without its weights (torch-free): its single files (circlestone-labs/Anima's split files, read as
sd-scripts' anima_train_network.py reads them), the flow options it reads (sd-scripts' names and meanings:
timestep_sampling, sigmoid_scale, discrete_flow_shift, weighting_scheme) and its LoRAs' network_args."""
from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from trainers.core.errors import ConfigIssue
from trainers.core.memory_facts import ANIMA_TOKENS, QWEN3_06B, QWEN3_06B_LINEAR, QWEN_IMAGE_VAE, ModelSize
from trainers.models.flow_rules import FlowRules, Part
from trainers.models.rules import CheckpointKeys, ModelFiles

# where its files nest the DiT: the published file's `net.`, ComfyUI's model prefixes, or none (a bare state dict)
ROOTS = ("net.", "model.diffusion_model.", "diffusion_model.", "")
DIT_MARKER = "t_embedding_norm."  # Cosmos-Predict2's DiT (MiniTrainDIT)
ADAPTER_MARKER = "llm_adapter.out_proj."  # Anima's LLM adapter, which sd-scripts looks for in the DiT file
TEXT_LENGTH = 512  # sd-scripts' qwen3_max_token_length and t5_max_token_length defaults; the adapter's 512 queries
T5_TOKENIZER = "google/t5-v1_1-xxl"  # the vocabulary of the adapter's query ids (sd-scripts' configs/t5_old)
TRAIN_LLM_ADAPTER = "train_llm_adapter"  # networks.lora_anima's network_args key: LoRA on the adapter's blocks too


class AnimaRules(FlowRules):
    name = "anima"
    title = "Anima"
    # activations: Lumina 2's scaled by width (benchmarks/count_model_sizes.py's way), to calibrate
    memory_facts = ModelSize(2_091_068_928, 2_058_100_736, QWEN3_06B, QWEN3_06B_LINEAR, QWEN_IMAGE_VAE, 1_433_600,
                             0, 28, "the published Anima sizes (Cosmos-Predict2 2B and its LLM adapter)",
                             1024 * 1024, 5.5, 0.53, tokens=ANIMA_TOKENS)
    base_model_version = "anima"  # sd-scripts' anima_train_network.py's ss_base_model_version
    modelspec_architecture = "anima-preview"  # sd-scripts' ARCH_ANIMA_PREVIEW
    arch_dir = Path(__file__).with_name("arch")  # none: its files are read by their tensor shapes
    # no diffusers pipeline (diffusers 0.42.1 has only a modular one, AnimaModularPipeline): no folder is claimed
    pipeline_class = "AnimaModularPipeline"
    detect_priority = 4
    frozen_text_encoder = "Qwen3"
    network_arg_keys = frozenset({TRAIN_LLM_ADAPTER})
    writes_single_files = True
    lora_loaders_missing = frozenset({"diffusers"})  # no Anima DiffusionPipeline (the modular one: another naming)
    reference_prefixes = tuple(f"{root}{DIT_MARKER}" for root in ROOTS)
    # circlestone-labs/Anima's split files: diffusion_models/anima-*.safetensors (DiT and llm_adapter), text_encoders/
    # qwen_3_06b_base.safetensors (sd-scripts' --qwen3), vae/qwen_image_vae.safetensors (sd-scripts' --vae); in one
    # file, under ComfyUI's prefixes of its text encoder (text_encoders.qwen3_06b.transformer.model.*) and VAE
    checkpoint_parts = (Part("llm", "text_encoders.qwen3_06b.transformer.", "text_encoder", "Qwen3 text encoder",
                             encoder_class="Qwen3Model", base_config=Path(__file__).with_name("text_encoder.json"),
                             tokenizer="Qwen/Qwen3-0.6B-Base"),
                        Part("vae", "vae.", "ae", "autoencoder (the Qwen-Image VAE, qwen_image_vae.safetensors)",
                             reader="trainers.models.qwen_image.parts",
                             file_keys=(("encoder.conv1.weight", "encoder.conv_in.weight"),
                                        ("conv2.weight", "post_quant_conv.weight"))))

    def claims_checkpoint(self, keys: CheckpointKeys) -> bool:
        """Cosmos-Predict2's DiT (Anima's adapter beside it, or in a file of its own: llm_adapter_path)."""
        return any(keys.has(f"{root}{DIT_MARKER}") and keys.has(f"{root}blocks.0.adaln_modulation_self_attn.")
                   for root in ROOTS)

    def checkpoint_issues(self, keys: CheckpointKeys, files: ModelFiles, vae_path: str = "") -> list[ConfigIssue]:
        issues = super().checkpoint_issues(keys, files, vae_path)
        if not any(keys.has(f"{root}{ADAPTER_MARKER}") for root in ROOTS) and not files.llm_adapter_path:
            issues.append(ConfigIssue("llm_adapter_path", f"{Path(keys.name).name} holds a Cosmos-Predict2 DiT "
                                      "without Anima's LLM adapter (llm_adapter.*): set llm_adapter_path to the "
                                      "adapter's .safetensors (as for sd-scripts), or give Anima's own "
                                      "diffusion_models file", "model"))
        return issues

    def option_issues(self, values: Mapping[str, Any]) -> list[ConfigIssue]:
        issues = super().option_issues(values)
        if values.get("vae"):
            issues.append(ConfigIssue("vae", "is a diffusers AutoencoderKL folder; Anima's autoencoder is the "
                                      "Qwen-Image VAE's file: set ae to qwen_image_vae.safetensors (sd-scripts' "
                                      "--vae)", "model"))
        if values.get("save_diffusers_lora"):
            issues.append(ConfigIssue("save_diffusers_lora", "diffusers has no Anima DiffusionPipeline (its modular "
                                      "AnimaModularPipeline reads only the dotted diffusion_model. naming); Anima's "
                                      "kohya files are what ComfyUI and sd-scripts read: leave it off",
                                      "network"))
        return issues

    def training_issues(self, trains: str, values: Mapping[str, Any]) -> list[ConfigIssue]:
        """A finetune is saved as the published single file: diffusers has no Anima pipeline to load a folder."""
        if trains == "full" and values.get("save_model_as", "diffusers") != "safetensors":
            return [ConfigIssue("save_model_as", "Anima finetunes are saved as one .safetensors file in the published "
                                "layout (ComfyUI's diffusion_models file, sd-scripts' anima_train.py output): diffusers "
                                "has no Anima pipeline that loads a folder; set save_model_as = 'safetensors'",
                                "saving")]
        return []


ANIMA = AnimaRules()
