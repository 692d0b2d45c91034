"""HunyuanVideo 1.5 text-to-video and image-to-video without its weights (torch-free): how its diffusers folders
are told apart, its published sizes, and the flow options it reads (musubi-tuner's hv_1_5_train_network.py names and meanings:
timestep_sampling, discrete_flow_shift, weighting_scheme; no guidance embedding). Its frames follow its causal 3D
VAE's rule, 1 + 4k, at 24 fps."""
from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from trainers.core.errors import ConfigIssue

from trainers.core.memory_facts import (BYT5_GLYPH, BYT5_GLYPH_LINEAR, HUNYUAN_VIDEO15_TOKENS, HUNYUAN_VIDEO15_VAE,
                                     QWEN25_VL_7B_TEXT, QWEN25_VL_7B_TEXT_LINEAR, ModelSize)
from trainers.models.flow_rules import FlowRules
from trainers.models.rules import ModelLoadError

I2V_PIPELINE = "HunyuanVideo15ImageToVideoPipeline"  # its image-to-video folders (a SigLIP image encoder beside)


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
    # files share the ByT5 mapper): recognised, refused by name
    reference_prefixes = ("cond_type_embedding.", "model.diffusion_model.cond_type_embedding.",
                          "diffusion_model.cond_type_embedding.")
    detect_priority = 5  # before HunyuanImage 2.1's (byt5_in.)
    reads_single_files = False
    writes_single_files = False
    checkpoint_parts = ()
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

    def option_issues(self, values: Mapping[str, Any]) -> list[ConfigIssue]:
        """Image to video: each clip's first frame is encoded at every step, so its latents are not cached."""
        issues = super().option_issues(values)
        folder = Path(str(values.get("pretrained_model_name_or_path") or "")).expanduser()
        if folder.is_dir() and is_i2v_folder(folder):
            issues += [ConfigIssue(name, f"{self.title} image-to-video encodes each clip's first frame at every step "
                                   "(its condition and SigLIP's states of it): leave it off", "dataset")
                       for name in ("cache_latents", "cache_latents_to_disk") if values.get(name)]
        return issues


def _transformer_config(folder: Path) -> dict[str, Any]:
    import json

    try:
        return dict(json.loads((folder / "transformer" / "config.json").read_text(encoding="utf-8")))
    except (OSError, ValueError):
        return {}


def is_i2v_folder(folder: Path) -> bool:
    """Whether a HunyuanVideo 1.5 folder is its image-to-video pipeline's."""
    import json

    try:
        index = json.loads((folder / "model_index.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return index.get("_class_name") == I2V_PIPELINE


HUNYUAN_VIDEO15 = HunyuanVideo15Rules()
