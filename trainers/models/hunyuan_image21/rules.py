"""HunyuanImage 2.1 without its weights (torch-free): its pipeline, its published sizes, and the flow options it reads
(sd-scripts' hunyuan_image_train_network.py names: timestep_sampling, discrete_flow_shift, model_prediction_type)."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from trainers.core.errors import ConfigIssue
from trainers.core.memory_facts import (BYT5_GLYPH, BYT5_GLYPH_LINEAR, HUNYUAN_IMAGE21_TOKENS, HUNYUAN_IMAGE21_VAE,
                                     QWEN25_VL_7B, QWEN25_VL_7B_LINEAR, ModelSize)
from trainers.models.flow_rules import FlowRules, Part
from trainers.models.rules import CheckpointKeys, ModelFiles, ModelLoadError

# ComfyUI's split files beside its diffusion_models file (sd-scripts' --text_encoder, --byt5, --vae): Qwen2.5-VL as
# Qwen-Image's reader takes it (the same qwen_2.5_vl_7b file), ByT5 in transformers' T5 layout, the autoencoder in
# Tencent's or diffusers' layout (hunyuan_image21/single_file.py); the tokenizers from the hub or tokenizer_cache_dir
SPLIT_PARTS = (Part("llm", "text_encoders.qwen25_7b.", "text_encoder", "Qwen2.5-VL text encoder (ComfyUI's "
                    "qwen_2.5_vl_7b.safetensors)", base_config=Path(__file__).parents[1] / "qwen_image" /
                    "text_encoder.json", tokenizer="hunyuanvideo-community/HunyuanImage-2.1-Diffusers",
                    tokenizer_subfolder="tokenizer", reader="trainers.models.qwen_image.parts"),
               Part("t5", "text_encoders.byt5.", "byt5", "ByT5 glyph encoder (ComfyUI's "
                    "byt5_small_glyphxl_fp16.safetensors)", tokenizer="google/byt5-small"),
               Part("vae", "vae.", "ae", "autoencoder (ComfyUI's hunyuan_image_2.1_vae_fp16.safetensors)",
                    reader="trainers.models.hunyuan_image21.single_file", denoiser_input=("img_in.proj.weight", 1),
                    latent_channels=64, file_keys=(("encoder.conv_in.weight",), ("decoder.conv_in.weight",))))
# diffusers' pipelines of the family that are not trained here (the refiner: another transformer and autoencoder)
REFUSED_PIPELINES = {"HunyuanImageRefinerPipeline": "the HunyuanImage 2.1 refiner"}


class HunyuanImage21Rules(FlowRules):
    name = "hunyuan_image21"
    title = "HunyuanImage 2.1"
    # benchmarks/count_model_sizes.py's count from arch/ (diffusers 0.42.1), plus sd-scripts' ByT5 glyph encoder;
    # blocks_to_swap counts two single blocks as one (as sd-scripts, and FLUX.1 here); activations: FLUX.1's scaled
    # by width x block-streams, at 2048x2048 (FLUX.1's 4096 tokens at 1024x1024), to calibrate
    memory_facts = ModelSize(17_425_795_520, 17_421_664_256, QWEN25_VL_7B + BYT5_GLYPH,
                             QWEN25_VL_7B_LINEAR + BYT5_GLYPH_LINEAR, HUNYUAN_IMAGE21_VAE, 5_877_760, 0, 40,
                             "the published HunyuanImage 2.1 sizes", 2048 * 2048, 29.5, 2.7,
                             tokens=HUNYUAN_IMAGE21_TOKENS)
    base_model_version = "hunyuan-image-2.1"  # sd-scripts' MODEL_VERSION_2_1
    modelspec_architecture = "hunyuan-image-2.1"  # sd-scripts' ARCH_HUNYUAN_IMAGE_2_1
    arch_dir = Path(__file__).with_name("arch")
    pipeline_class = "HunyuanImagePipeline"
    # the reference (Tencent's dit/hunyuanimage2.1.safetensors) and ComfyUI's diffusion_models files, told by the
    # ByT5 mapper that is this family's own (reference.py converts them), read with ComfyUI's split files beside
    reference_prefixes = ("byt5_in.", "model.diffusion_model.byt5_in.", "diffusion_model.byt5_in.")
    detect_priority = 4  # before FLUX.1's: its single files have FLUX.1's double and single blocks too
    writes_single_files = False  # its finetunes are saved as diffusers folders
    checkpoint_parts = SPLIT_PARTS
    # its text encoders stay frozen (sd-scripts: "LoRA modules for Text Encoders are not supported")
    frozen_text_encoder = "Qwen2.5-VL and ByT5"

    def checkpoint_issues(self, keys: CheckpointKeys, files: ModelFiles, vae_path: str = "") -> list[ConfigIssue]:
        """ComfyUI's scaled fp8 transformer files (a scale beside each weight, which the conversion would drop) are
        refused by name; otherwise the parts the file lacks."""
        if any(k.endswith(("scaled_fp8", ".scale_weight")) for k in keys.shapes):
            return [ConfigIssue("pretrained_model_name_or_path", f"{Path(keys.name).name} stores the {self.title} "
                                "transformer as scaled fp8 (ComfyUI's *_fp8_scaled files), which is not read here: "
                                "use its bf16 file (hunyuanimage2.1_bf16.safetensors) and set fp8_base to train in "
                                "fp8", "model")]
        return super().checkpoint_issues(keys, files, vae_path)

    def claims_folder(self, index: dict[str, Any], unet_config: dict[str, Any], folder: Path) -> bool:
        """HunyuanImagePipeline folders; its refiner's is refused by name (before anything loads)."""
        pipeline = str(index.get("_class_name", ""))
        if pipeline in REFUSED_PIPELINES:
            raise ModelLoadError(f"{folder} is {REFUSED_PIPELINES[pipeline]} ({pipeline}), which Atelier does not "
                                 f"train: give the base model's diffusers folder ({self.pipeline_class})")
        return pipeline == self.pipeline_class


HUNYUAN_IMAGE21 = HunyuanImage21Rules()
