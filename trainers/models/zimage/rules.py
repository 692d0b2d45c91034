"""Z-Image without its weights (torch-free): its pipeline, and the flow options it reads (musubi-tuner's names and
meanings for Z-Image: timestep_sampling, discrete_flow_shift, weighting_scheme; no guidance embedding)."""
from __future__ import annotations

from pathlib import Path

from trainers.core.memory_facts import FLOW_AE, QWEN3_4B, QWEN3_4B_LINEAR, ZIMAGE_TOKENS, ModelSize
from trainers.models.flow_rules import FlowRules, Part
from trainers.models.rules import DistilledBase, json_or_empty

TURBO_SHIFT = 3.0  # Tongyi-MAI/Z-Image-Turbo's scheduler; the undistilled Tongyi-MAI/Z-Image's is 6.0
TURBO_ADAPTER = "ostris/zimage_turbo_training_adapter (zimage_turbo_training_adapter_v2.safetensors)"


class ZImageRules(FlowRules):
    name = "zimage"
    title = "Z-Image"
    # activations: FLUX.1's scaled by width x block-streams (benchmarks/count_model_sizes.py), to calibrate
    memory_facts = ModelSize(6_154_908_736, 6_153_863_168, QWEN3_4B, QWEN3_4B_LINEAR, FLOW_AE, 1_958_400, 0, 30,
                             "the published Z-Image sizes", 1024 * 1024, 11.8, 1.1, tokens=ZIMAGE_TOKENS)
    arch_dir = Path(__file__).with_name("arch")  # none: diffusers folders carry their configs
    pipeline_class = "ZImagePipeline"
    base_model_version = "z_image"  # musubi-tuner's ss_base_model_version (ARCHITECTURE_Z_IMAGE_FULL)
    modelspec_architecture = "Z-Image"
    frozen_text_encoder = "Qwen3"
    # ComfyUI's diffusion_models files and musubi-tuner's --dit (NextDiT names, as Lumina 2's, but with the caption
    # padding token Lumina 2 has not), its parts in files of their own
    reference_prefixes = ("cap_pad_token", "model.diffusion_model.cap_pad_token", "diffusion_model.cap_pad_token")
    detect_priority = 5  # before Lumina 2, whose NextDiT keys its files share
    checkpoint_parts = (Part("llm", "text_encoders.qwen3_4b.", "text_encoder", "Qwen3 text encoder",
                             encoder_class="Qwen3Model", base_config=Path(__file__).with_name("text_encoder.json"),
                             tokenizer="Qwen/Qwen3-4B"),
                        Part("vae", "vae.", "ae", "autoencoder (FLUX.1's ae.safetensors)",
                             denoiser_input=("x_embedder.weight", 4)))

    def distilled_base(self, path: Path) -> DistilledBase | None:
        """Turbo: both publish the same transformer config; Turbo's scheduler shifts by 3.0, the base model's by 6.0
        (a single file, without a scheduler, does not tell)."""
        config = json_or_empty(path / "scheduler" / "scheduler_config.json") if path.is_dir() else {}
        if config.get("shift") != TURBO_SHIFT or config.get("use_dynamic_shifting"):
            return None
        return DistilledBase("Z-Image Turbo", f"its scheduler's shift is {TURBO_SHIFT:g}, where Z-Image base's is 6",
                             TURBO_ADAPTER)


ZIMAGE = ZImageRules()
