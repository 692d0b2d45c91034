"""HunyuanVideo 1.5 text-to-video and image-to-video without its weights (torch-free): how its diffusers folders
are told apart, its published sizes, and the flow options it reads (musubi-tuner's hv_1_5_train_network.py names and meanings:
timestep_sampling, discrete_flow_shift, weighting_scheme; no guidance embedding). Its frames follow its causal 3D
VAE's rule, 1 + 4k, at 24 fps."""
from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from trainers.core.errors import ConfigIssue

from trainers.core.fsio import read_safetensors_header
from trainers.core.memory_facts import (BYT5_GLYPH, BYT5_GLYPH_LINEAR, HUNYUAN_VIDEO15_TOKENS, HUNYUAN_VIDEO15_VAE,
                                     QWEN25_VL_7B_TEXT, QWEN25_VL_7B_TEXT_LINEAR, ModelSize)
from trainers.models.flow_rules import FlowRules, Part
from trainers.models.hunyuan_image21.rules import SPLIT_PARTS as HUNYUAN_IMAGE21_PARTS
from trainers.models.rules import CheckpointKeys, ModelFiles, ModelLoadError

I2V_PIPELINE = "HunyuanVideo15ImageToVideoPipeline"  # its image-to-video folders (a SigLIP image encoder beside)
ARCH = Path(__file__).with_name("arch")
# ComfyUI's split files beside its diffusion_models file (musubi-tuner's --text_encoder, --byt5, --vae): Qwen2.5-VL's
# language model (the pipeline's Qwen2_5_VLTextModel; the file's vision tower is not read), ByT5 as HunyuanImage
# 2.1 reads it (the same byt5_small_glyphxl file), the autoencoder in Tencent's or diffusers' layout
# (single_file.py); the tokenizers from the hub once, then from tokenizer_cache_dir
SPLIT_PARTS = (Part("llm", "text_encoders.qwen25_7b.", "text_encoder", "Qwen2.5-VL text encoder (ComfyUI's "
                    "qwen_2.5_vl_7b.safetensors)", encoder_class="Qwen2_5_VLTextModel",
                    base_config=ARCH / "text_encoder.json",
                    tokenizer="hunyuanvideo-community/HunyuanVideo-1.5-480p_t2v",
                    tokenizer_subfolder="tokenizer"),
               HUNYUAN_IMAGE21_PARTS[1],
               Part("vae", "vae.", "ae", "autoencoder (ComfyUI's hunyuanvideo15_vae_fp16.safetensors)",
                    reader="trainers.models.hunyuan_video15.single_file", latent_channels=32,
                    file_keys=(("encoder.conv_in.conv.weight",), ("decoder.conv_in.conv.weight",))))
# the tensors that make a file SigLIP's vision model in transformers' layout (ComfyUI's clip_vision file)
SIGLIP_KEYS = ("vision_model.embeddings.patch_embedding.weight", "vision_model.embeddings.position_embedding.weight",
               "vision_model.encoder.layers.0.mlp.fc1.weight")
# what a single file's name says it holds (Tencent's transformer/<size>_<task>/ folders, ComfyUI's file names)
_TASK_IN_NAME = re.compile(r"(?:^|[_\-./])(t2v|i2v)(?:[_\-./]|$)")


class HunyuanVideo15Rules(FlowRules):
    name = "hunyuan_video15"
    title = "HunyuanVideo 1.5"
    # the 480p T2V transformer (diffusers 0.42.1's defaults, task_type t2v) counted on the meta device, Qwen2.5-VL's
    # text model (no vision tower: the pipeline's Qwen2_5_VLTextModel) and the ByT5 glyph encoder; activations from its
    # sequence (HUNYUAN_VIDEO15_TOKENS: 9 latent frames x 1590 tokens for 33 frames at 848x480), the figures for that
    # window (FLUX.1's scaled by width x block-streams and tokens) kept beside it
    memory_facts = ModelSize(8_326_608_160, 8_323_022_848, QWEN25_VL_7B_TEXT + BYT5_GLYPH,
                             QWEN25_VL_7B_TEXT_LINEAR + BYT5_GLYPH_LINEAR, HUNYUAN_VIDEO15_VAE, 5_087_232, 0, 54,
                             "the published HunyuanVideo 1.5 480p T2V sizes", 848 * 480, 79.4, 7.3,
                             tokens=HUNYUAN_VIDEO15_TOKENS)
    base_model_version = "hunyuan_video_1_5"  # musubi-tuner's ss_base_model_version (ARCHITECTURE_..._FULL)
    modelspec_architecture = "hunyuan-video-1.5"  # musubi-tuner's ARCH_HUNYUAN_VIDEO_1_5
    # the 480p T2V configs (transformer/, vae/): diffusers 0.42.1's defaults of its classes, task_type t2v
    arch_dir = Path(__file__).with_name("arch")
    pipeline_class = "HunyuanVideo15Pipeline"
    transformer_class = "HunyuanVideo15Transformer3DModel"
    frozen_text_encoder = "Qwen2.5-VL and ByT5"
    # Tencent's and ComfyUI's single files (the condition-type embedding is this family's own; HunyuanImage 2.1's
    # files share the ByT5 mapper), read with ComfyUI's split files beside (reference.py converts the transformer)
    reference_prefixes = ("cond_type_embedding.", "model.diffusion_model.cond_type_embedding.",
                          "diffusion_model.cond_type_embedding.")
    detect_priority = 5  # before HunyuanImage 2.1's (byt5_in.)
    writes_single_files = False  # its finetunes are saved as diffusers folders
    checkpoint_parts = SPLIT_PARTS
    # the video layer: clips train (video_directory datasets), frames come 1 + frame_rule x k (the causal 3D VAE)
    is_video = True
    frame_rule = 4
    frame_rate = 24.0  # HunyuanVideo 1.5's frames per second (musubi-tuner drops source_fps to it)

    def claims_folder(self, index: dict[str, Any], unet_config: dict[str, Any], folder: Path) -> bool:
        """HunyuanVideo15Pipeline (text-to-video) and HunyuanVideo15ImageToVideoPipeline folders; an image-to-video
        one without its image encoder is refused by name."""
        pipeline = str(index.get("_class_name", ""))
        if pipeline not in (self.pipeline_class, I2V_PIPELINE):
            return False
        if (index.get("transformer") or [None, None])[-1] != self.transformer_class:
            return False
        if pipeline == I2V_PIPELINE and not all((index.get(k) or [None, None])[-1]
                                                for k in ("image_encoder", "feature_extractor")):
            raise ModelLoadError(f"{folder} is a HunyuanVideo 1.5 image-to-video folder ({pipeline}) without its "
                                 "image_encoder and feature_extractor (SigLIP), which its training reads: give the "
                                 "whole folder")
        if _transformer_config(folder).get("use_meanflow"):
            raise ModelLoadError(f"{folder} is a HunyuanVideo 1.5 step-distilled (MeanFlow) model, whose second "
                                 "timestep Atelier does not train: give the base 480p or 720p folder")
        return True

    def checkpoint_issues(self, keys: CheckpointKeys, files: ModelFiles, vae_path: str = "") -> list[ConfigIssue]:
        """A transformer file refused by name (ComfyUI's scaled fp8, the step-distilled MeanFlow one), one whose name
        says the other task than image_encoder gives (the files of both tasks have the same tensors), an
        image_encoder file that is not SigLIP's; then the parts the file lacks."""
        name = Path(keys.name).name
        if any(k.endswith(("scaled_fp8", ".scale_weight")) for k in keys.shapes):
            return [ConfigIssue("pretrained_model_name_or_path", f"{name} stores the {self.title} transformer as "
                                "scaled fp8 (ComfyUI's *_fp8_scaled files), which is not read here: use its fp16 "
                                "or bf16 file and set fp8_base to train in fp8", "model")]
        if any(k.endswith("time_r_in.mlp.0.weight") for k in keys.shapes):
            return [ConfigIssue("pretrained_model_name_or_path", f"{name} is a {self.title} step-distilled (MeanFlow) "
                                "transformer, whose second timestep Atelier does not train: give the 480p or 720p "
                                "t2v or i2v file", "model")]
        issues = super().checkpoint_issues(keys, files, vae_path)
        task = file_task(keys.name)
        if task == "i2v" and not files.image_encoder:
            issues.append(ConfigIssue("image_encoder", f"{name} is the {self.title} image-to-video transformer (its "
                                      "name says i2v), which trains with its first frame's SigLIP states: set "
                                      "image_encoder to ComfyUI's clip_vision/sigclip_vision_patch14_384.safetensors"
                                      ", or give the t2v file", "model"))
        elif task == "t2v" and files.image_encoder:
            issues.append(ConfigIssue("image_encoder", f"{name} is the {self.title} text-to-video transformer (its "
                                      "name says t2v): leave image_encoder empty, or give the i2v file "
                                      "(hunyuanvideo1.5_720p_i2v_fp16.safetensors) to train image to video", "model"))
        if files.image_encoder and (problem := _siglip_file_problem(files.image_encoder)):
            issues.append(ConfigIssue("image_encoder", f"{files.image_encoder}: {problem}", "model"))
        return issues

    def option_issues(self, values: Mapping[str, Any]) -> list[ConfigIssue]:
        """image_encoder given with a diffusers folder (which has its own)."""
        issues = super().option_issues(values)
        folder = Path(str(values.get("pretrained_model_name_or_path") or "")).expanduser()
        if folder.is_dir() and str(values.get("image_encoder") or "").strip():
            issues.append(ConfigIssue("image_encoder", f"is read with a {self.title} transformer file only; a "
                                      "diffusers folder's image-to-video pipeline has its own image_encoder: leave it "
                                      "empty", "model"))
        return issues


def _transformer_config(folder: Path) -> dict[str, Any]:
    import json

    try:
        return dict(json.loads((folder / "transformer" / "config.json").read_text(encoding="utf-8")))
    except (OSError, ValueError):
        return {}


def file_task(path: str) -> str:
    """'t2v' or 'i2v' where a transformer file's name (or its folder's, Tencent's transformer/720p_i2v/) says which,
    else ''."""
    found = _TASK_IN_NAME.findall("/".join(Path(path).parts[-2:]).lower())
    return found[-1] if found else ""


def _siglip_file_problem(path: str) -> str:
    """Why an image_encoder file is not SigLIP's vision model in transformers' layout ("" when it is)."""
    try:
        shapes, _ = read_safetensors_header(Path(path).expanduser())
    except (OSError, ValueError) as err:
        return f"cannot be read as a .safetensors file ({err})"
    missing = [k for k in SIGLIP_KEYS if k not in shapes]
    return (f"has no {missing[0]}: it is not SigLIP's vision model (ComfyUI's clip_vision/"
            "sigclip_vision_patch14_384.safetensors)") if missing else ""


def is_i2v_folder(folder: Path) -> bool:
    """Whether a HunyuanVideo 1.5 folder is its image-to-video pipeline's."""
    import json

    try:
        index = json.loads((folder / "model_index.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return index.get("_class_name") == I2V_PIPELINE


HUNYUAN_VIDEO15 = HunyuanVideo15Rules()
