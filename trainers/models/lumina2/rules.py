"""Lumina Image 2.0 without its weights (torch-free): its pipeline, and the flow options it reads (sd-scripts'
lumina_train_network.py: timestep_sampling, discrete_flow_shift, model_prediction_type, weighting_scheme)."""
from __future__ import annotations

from pathlib import Path

from trainers.core.memory_facts import FLOW_AE, GEMMA2_2B, GEMMA2_2B_LINEAR, LUMINA2_TOKENS, ModelSize
from trainers.models.flow_rules import FlowRules, Part
from trainers.models.rules import CheckpointKeys

ROOTS = ("", "model.diffusion_model.", "diffusion_model.")  # sd-scripts', ComfyUI's and other single files
TEXT_LENGTH = 256  # sd-scripts' gemma2_max_token_length default; Lumina2Pipeline's max_sequence_length
# Lumina2Pipeline's system prompt before every caption (sd-scripts' --system_prompt, "<Prompt Start>" after it)
SYSTEM_PROMPT = ("You are an assistant designed to generate superior images with the superior degree of image-text "
                 "alignment based on textual prompts or user prompts.")


class Lumina2Rules(FlowRules):
    name = "lumina2"
    title = "Lumina 2"
    # activations: FLUX.1's scaled by width x block-streams (benchmarks/count_model_sizes.py), to calibrate
    memory_facts = ModelSize(2_609_769_152, 2_609_217_536, GEMMA2_2B, GEMMA2_2B_LINEAR, FLOW_AE, 1_651_776, 0, 26,
                             "the published Lumina-Image-2.0 sizes", 1024 * 1024, 6.2, 0.6,
                             tokens=LUMINA2_TOKENS)
    base_model_version = "lumina2"  # sd-scripts' MODEL_VERSION_LUMINA_V2
    modelspec_architecture = "lumina-2"
    arch_dir = Path(__file__).with_name("arch")  # none: diffusers folders carry their configs
    pipeline_class = "Lumina2Pipeline"
    detect_priority = 4  # its single files have NextDiT's refiners, as Z-Image's have
    frozen_text_encoder = "Gemma 2"
    reference_prefixes = tuple(f"{root}cap_embedder." for root in ROOTS)
    # ComfyUI's split files: diffusion_models (NextDiT), text_encoders/gemma_2_2b, FLUX.1's ae
    checkpoint_parts = (Part("llm", "text_encoders.gemma2_2b.", "text_encoder", "Gemma 2 text encoder",
                             encoder_class="Gemma2Model", base_config=Path(__file__).with_name("text_encoder.json"),
                             tokenizer="Alpha-VLLM/Lumina-Image-2.0", tokenizer_subfolder="tokenizer"),
                        Part("vae", "vae.", "ae", "autoencoder (FLUX.1's ae.safetensors)",
                             denoiser_input=("x_embedder.weight", 4)))

    def claims_checkpoint(self, keys: CheckpointKeys) -> bool:
        """NextDiT's caption embedder beside a plain x_embedder (Z-Image's files, which have them too, are claimed
        first, by their caption padding token)."""
        return any(keys.has(f"{root}cap_embedder.") and keys.has(f"{root}x_embedder.") for root in ROOTS)


LUMINA2 = Lumina2Rules()
