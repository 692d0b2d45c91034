"""LTX-2 text-to-video without its weights (torch-free): how its diffusers folders are told apart (LTX2Pipeline with
an LTX2VideoTransformer3DModel; its other pipelines and LTX-Video 0.9's refused by name), its published sizes, and
the flow options it reads (timestep_sampling, discrete_flow_shift, weighting_scheme; no guidance embedding). Its
frames follow its causal video autoencoder's rule, 1 + 8k, at 24 fps; its buckets step by 32 pixels (the 32x
autoencoder, 1x1 patches)."""
from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from trainers.core.errors import ConfigIssue
from trainers.core.memory_facts import (GEMMA3_12B, GEMMA3_12B_LINEAR, LTX2_CONNECTORS, LTX2_CONNECTORS_LINEAR,
                                     LTX2_TOKENS, LTX2_VAE, ModelSize)
from trainers.models.flow_rules import FlowRules
from trainers.models.rules import ModelLoadError

# diffusers' pipelines of LTX-2 and LTX-Video that are not trained here, refused by name before anything loads
REFUSED_PIPELINES = {
    "LTX2ImageToVideoPipeline": "an LTX-2 image-to-video pipeline", "LTX2ConditionPipeline": "an LTX-2 condition "
    "pipeline", "LTX2LatentUpsamplePipeline": "LTX-2's latent upsampler", "LTXPipeline": "an LTX-Video 0.9 model",
    "LTXImageToVideoPipeline": "an LTX-Video 0.9 model", "LTXConditionPipeline": "an LTX-Video 0.9 model",
    "LTXLatentUpsamplePipeline": "LTX-Video's latent upsampler"}
# the 19B transformer (diffusers 0.42.1's defaults, LTX-2.0's layout) counted on the meta device, and the LoRA
# parameters per rank on its video stream's attention and feed-forward linears (480 of them over 48 blocks)
LTX2_19B, LTX2_19B_LINEAR, LTX2_19B_LORA_PER_RANK = 18_876_174_592, 18_866_503_680, 5_111_808


class LTX2Rules(FlowRules):
    name = "ltx2"
    title = "LTX-2"
    # activations from its sequence (LTX2_TOKENS: the run's windows, 49 frames when its dataset states none); the
    # figures beside it are for one 49-frame clip at 768x512 (7 latent frames x 384 tokens), HunyuanVideo 1.5's
    # scaled by width x blocks x tokens, to calibrate on a GPU
    memory_facts = ModelSize(LTX2_19B, LTX2_19B_LINEAR, GEMMA3_12B + LTX2_CONNECTORS,
                             GEMMA3_12B_LINEAR + LTX2_CONNECTORS_LINEAR, LTX2_VAE, LTX2_19B_LORA_PER_RANK, 0, 48,
                             "the published LTX-2 19B sizes", 768 * 512, 26.5, 2.4, tokens=LTX2_TOKENS)
    base_model_version = "ltx2"  # ai-toolkit's get_base_model_version
    modelspec_architecture = "ltx-2"
    pipeline_class = "LTX2Pipeline"
    transformer_class = "LTX2VideoTransformer3DModel"
    frozen_text_encoder = "Gemma 3"
    # Lightricks' and ComfyUI's single files (the audio stream's timestep embedding is LTX-2's own): recognised,
    # refused by name
    reference_prefixes = ("audio_adaln_single.", "model.diffusion_model.audio_adaln_single.",
                          "diffusion_model.audio_adaln_single.")
    detect_priority = 5
    reads_single_files = False
    writes_single_files = False
    checkpoint_parts = ()
    # the video layer: clips train (video_directory datasets), frames come 1 + frame_rule x k (the causal video VAE)
    is_video = True
    frame_rule = 8
    frame_rate = 24.0  # LTX2Pipeline's frame_rate
    bucket_step = 32

    def claims_folder(self, index: dict[str, Any], unet_config: dict[str, Any], folder: Path) -> bool:
        """LTX2Pipeline folders with an LTX2VideoTransformer3DModel; LTX-2's other pipelines and LTX-Video 0.9's
        are refused by name."""
        pipeline = str(index.get("_class_name", ""))
        if pipeline in REFUSED_PIPELINES:
            raise ModelLoadError(f"{folder} is {REFUSED_PIPELINES[pipeline]} ({pipeline}), which Atelier does not "
                                 f"train: give an LTX-2 text-to-video diffusers folder ({self.pipeline_class})")
        if pipeline != self.pipeline_class:
            return False
        return (index.get("transformer") or [None, None])[-1] == self.transformer_class

    def option_issues(self, values: Mapping[str, Any]) -> list[ConfigIssue]:
        """The flow rules, and text_encoder_precision 'fp8' refused by name: Gemma 3's LM head shares its weight with
        the token embedding, which fp8 casting then leaves in fp8 (its scaled embedding cannot compute in it)."""
        issues = super().option_issues(values)
        if values.get("text_encoder_precision") == "fp8":
            issues.append(ConfigIssue("text_encoder_precision", f"'fp8' does not work for {self.title}'s Gemma 3 (its "
                                      "LM head and token embedding share one weight, which fp8 storage breaks): use "
                                      "'int8' or 'nf4'", "precision"))
        return issues


LTX2 = LTX2Rules()
