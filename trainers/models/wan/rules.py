"""Wan 2.1 text-to-video without its weights (torch-free): how its diffusers folders are told apart, and the flow
options it reads (musubi-tuner's names and meanings for Wan: timestep_sampling, discrete_flow_shift,
weighting_scheme; no guidance embedding). Its frames follow the causal 3D VAE's rule, 1 + 4k."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from trainers.core.memory_facts import (
    UMT5_XXL,
    UMT5_XXL_LINEAR,
    WAN21_VAE,
    WAN_14B,
    WAN_14B_LINEAR,
    WAN_14B_LORA_PER_RANK,
    ModelSize,
)
from trainers.models.flow_rules import FlowRules
from trainers.models.rules import ModelLoadError

# the 14B's activations for one 81-frame clip at 832x480 (21 latent frames x 1560 tokens): the 1.3B's scaled by width
# (5120 / 1536) and depth (40 / 30), to calibrate on a GPU
WAN_14B_ACTIVATIONS = (832 * 480, 149.0, 13.8)
# Wan pipelines of diffusers that are not trained here yet, refused by name before anything loads
REFUSED_PIPELINES = {"WanImageToVideoPipeline": "a Wan image-to-video model",
                     "WanVACEPipeline": "a Wan VACE model", "WanVideoToVideoPipeline": "a Wan video-to-video pipeline",
                     "WanAnimatePipeline": "a Wan Animate model"}


class WanRules(FlowRules):
    name = "wan21"
    title = "Wan 2.1"
    # the 1.3B counted from arch/ (diffusers 0.42.1); activations are for one 81-frame clip at 832x480 (21 latent
    # frames x 1560 tokens): Z-Image's scaled by tokens x width, to calibrate on a GPU
    memory_facts = ModelSize(1_418_996_800, 1_417_641_984, UMT5_XXL, UMT5_XXL_LINEAR, WAN21_VAE, 1_367_040, 0, 30,
                             "the published Wan 2.1 T2V 1.3B sizes", 832 * 480, 33.6, 3.1)
    memory_variants = {("14b",): ModelSize(WAN_14B, WAN_14B_LINEAR, UMT5_XXL, UMT5_XXL_LINEAR, WAN21_VAE,
                                           WAN_14B_LORA_PER_RANK, 0, 40, "the published Wan 2.1 T2V 14B sizes",
                                           *WAN_14B_ACTIVATIONS)}
    base_model_version = "wan21_t2v"  # musubi-tuner's ss_base_model_version (ARCHITECTURE_WAN "wan" + task)
    modelspec_architecture = "wan2.1-t2v"
    arch_dir = Path(__file__).with_name("arch")  # the published 1.3B configs (transformer/, vae/)
    pipeline_class = "WanPipeline"
    transformer_class = "WanTransformer3DModel"
    frozen_text_encoder = "UMT5"
    # the reference layout (Wan-AI's and ComfyUI's diffusion_models files): recognised, refused by name
    reference_prefixes = ("head.modulation", "model.diffusion_model.head.modulation", "diffusion_model.head.modulation")
    reads_single_files = False
    writes_single_files = False
    checkpoint_parts = ()
    # the video layer: clips train (video_directory datasets), frames come 1 + frame_rule x k (the causal 3D VAE)
    is_video = True
    frame_rule = 4
    frame_rate = 16.0  # Wan 2.1's frames per second (musubi-tuner drops source_fps to it)

    def claims_folder(self, index: dict[str, Any], unet_config: dict[str, Any], folder: Path) -> bool:
        """WanPipeline folders with one WanTransformer3DModel (a second expert is Wan 2.2's A14B pair); the other
        Wan pipelines are refused by name."""
        pipeline = str(index.get("_class_name", ""))
        if pipeline in REFUSED_PIPELINES:
            raise ModelLoadError(f"{folder} is {REFUSED_PIPELINES[pipeline]} ({pipeline}), which Atelier does not "
                                 f"train yet: give a Wan 2.1 text-to-video diffusers folder ({self.pipeline_class})")
        if pipeline != self.pipeline_class:
            return False
        transformer = index.get("transformer") or [None, None]
        if transformer[-1] != self.transformer_class:
            return False
        if index.get("expand_timesteps"):
            return False  # Wan 2.2's TI2V 5B (wan/ti2v/rules.py)
        # Wan 2.2's A14B pair (transformer_2, boundary_ratio) is Wan 2.2's (wan22/rules.py)
        return (index.get("transformer_2") or [None, None])[-1] is None and index.get("boundary_ratio") is None


WAN21 = WanRules()
