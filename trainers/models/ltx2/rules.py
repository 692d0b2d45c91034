"""LTX-2 text-to-video without its weights (torch-free): how its diffusers folders are told apart (LTX2Pipeline with
an LTX2VideoTransformer3DModel; its other pipelines and LTX-Video 0.9's refused by name), what its single files hold
(Lightricks' ltx-2-19b-dev.safetensors with ComfyUI's Gemma 3 file beside it; the quantized, distilled and later
ones refused by name), its published sizes, and the flow options it reads (timestep_sampling, discrete_flow_shift,
weighting_scheme; no guidance embedding). Its frames follow its causal video autoencoder's rule, 1 + 8k, at 24 fps;
its buckets step by 32 pixels (the 32x autoencoder, 1x1 patches)."""
from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from trainers.core.errors import ConfigIssue
from trainers.core.fsio import read_safetensors_header
from trainers.core.memory_facts import (GEMMA3_12B, GEMMA3_12B_LINEAR, LTX2_CONNECTORS, LTX2_CONNECTORS_LINEAR,
                                     LTX2_TOKENS, LTX2_VAE, ModelSize)
from trainers.models.flow_rules import FlowRules, Part
from trainers.models.ltx2 import layout
from trainers.models.rules import CheckpointKeys, ModelFiles, ModelLoadError

I2V_PIPELINE = "LTX2ImageToVideoPipeline"  # its folders train as image-to-video (first_frame.py)
# diffusers' pipelines of LTX-2 and LTX-Video that are not trained here, refused by name before anything loads
REFUSED_PIPELINES = {
    "LTX2ConditionPipeline": "an LTX-2 condition pipeline", "LTX2LatentUpsamplePipeline": "LTX-2's latent upsampler",
    "LTXPipeline": "an LTX-Video 0.9 model", "LTXImageToVideoPipeline": "an LTX-Video 0.9 model",
    "LTXConditionPipeline": "an LTX-Video 0.9 model", "LTXLatentUpsamplePipeline": "LTX-Video's latent upsampler"}
ARCH = Path(__file__).with_name("arch")  # the published LTX-2.0 configs (diffusers' conversion script's), Gemma 3's
# the parts beside the transformer: Gemma 3 from its own file (ComfyUI's; the tokenizer from Lightricks/LTX-2's
# diffusers layout, kept in tokenizer_cache_dir) and the video autoencoder, in the model file or one of its own
TEXT_ENCODER = Part("llm", "text_encoders.gemma3_12b.", "text_encoder", "Gemma 3 12B text encoder (ComfyUI's "
                    "text_encoders/gemma_3_12B_it.safetensors)", encoder_class="Gemma3TextModel",
                    base_config=ARCH / "text_encoder" / "config.json", tokenizer="Lightricks/LTX-2",
                    tokenizer_subfolder="tokenizer")
VIDEO_VAE = Part("vae", layout.VAE, "ae", "LTX-2 video autoencoder (vae. in ltx-2-19b-dev.safetensors)",
                 latent_channels=128, denoiser_input=("patchify_proj.weight", 1),
                 file_keys=(("vae.encoder.conv_in.conv.weight", "encoder.conv_in.conv.weight"),
                            ("vae.decoder.conv_in.conv.weight", "decoder.conv_in.conv.weight")))
# what only the model file holds: the text connectors and the audio parts its pipeline is built with
OWN_PARTS = ((layout.CONNECTORS[0], "text connectors (video_embeddings_connector.)"),
             (layout.PROJECTION, "text projection (text_embedding_projection.aggregate_embed.)"),
             (layout.AUDIO_VAE, "audio autoencoder (audio_vae.)"), (layout.VOCODER, "vocoder (vocoder.)"))
FILE = "ltx-2-19b-dev.safetensors"  # Lightricks' bf16 file, which ComfyUI loads as a checkpoint too
# the 19B transformer (diffusers 0.42.1's defaults, LTX-2.0's layout) counted on the meta device, and the LoRA
# parameters per rank on its video stream's attention and feed-forward linears (480 of them over 48 blocks)
LTX2_19B, LTX2_19B_LINEAR, LTX2_19B_LORA_PER_RANK = 18_876_174_592, 18_866_503_680, 5_111_808
# and with_audio's on the audio stream's attention and feed-forward (2048 wide) and both audio-video cross-attentions
# (between 4096 and 2048), 18 linears a block
LTX2_19B_AUDIO_LORA_PER_RANK = 4_521_984


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
    # Lightricks' and ComfyUI's single files, told by the audio stream's timestep embedding (LTX-2's own)
    reference_prefixes = tuple(prefix + layout.MARKER for prefix in layout.PREFIXES)
    detect_priority = 5
    writes_single_files = False
    checkpoint_parts = (TEXT_ENCODER, VIDEO_VAE)
    arch_dir = ARCH
    # the video layer: clips train (video_directory datasets), frames come 1 + frame_rule x k (the causal video VAE)
    is_video = True
    frame_rule = 8
    frame_rate = 24.0  # LTX2Pipeline's frame_rate
    bucket_step = 32

    def claims_folder(self, index: dict[str, Any], unet_config: dict[str, Any], folder: Path) -> bool:
        """LTX2Pipeline and LTX2ImageToVideoPipeline folders with an LTX2VideoTransformer3DModel; LTX-2's other
        pipelines and LTX-Video 0.9's are refused by name."""
        pipeline = str(index.get("_class_name", ""))
        if pipeline in REFUSED_PIPELINES:
            raise ModelLoadError(f"{folder} is {REFUSED_PIPELINES[pipeline]} ({pipeline}), which Atelier does not "
                                 f"train: give an LTX-2 diffusers folder ({self.pipeline_class}; {I2V_PIPELINE} "
                                 "trains image-to-video)")
        if pipeline not in (self.pipeline_class, I2V_PIPELINE):
            return False
        return (index.get("transformer") or [None, None])[-1] == self.transformer_class

    def checkpoint_issues(self, keys: CheckpointKeys, files: ModelFiles, vae_path: str = "") -> list[ConfigIssue]:
        """LTX-2.0's files in Lightricks' layout are read; its quantized and distilled files and later versions'
        are refused by name, and so is a file without the parts only it can hold, or a text encoder file that is
        not Gemma 3's. Then the parts (Gemma 3, the video autoencoder) it lacks with no option set."""
        name = Path(keys.name).name
        if later := layout.later_layout(keys.shapes):
            why = f"is an LTX-2.3 or later model (it has {later})"
        elif scale := layout.quantized(keys.shapes):
            why = f"stores quantized weights with their scales (fp8 or fp4: {scale}), which are not read here"
        elif "distilled" in name.lower():
            why = ("is LTX-2's distilled model (by its name), which samples with its own few-step schedule and is "
                   "not trained here")
        else:
            missing = [what for prefix, what in OWN_PARTS if not any(prefix in k for k in keys.shapes)]
            why = f"holds no {' and no '.join(missing)}" if missing else ""
        if why:
            return [ConfigIssue("pretrained_model_name_or_path", f"{name} {why}: give Lightricks' {FILE} (bf16; "
                                "fp8_base trains it in fp8) or an LTX-2 diffusers folder", "model")]
        return _gemma_file_issues(files.text_encoder) + super().checkpoint_issues(keys, files, vae_path)

    def trained_size(self, values: Mapping[str, Any], size: ModelSize) -> ModelSize:
        """with_audio: the audio targets' LoRA parameters too (the published share of the video targets')."""
        if not values.get("with_audio"):
            return size
        extra = round(size.lora_per_rank * LTX2_19B_AUDIO_LORA_PER_RANK / LTX2_19B_LORA_PER_RANK)
        return dataclasses.replace(size, lora_per_rank=size.lora_per_rank + extra)

    def option_issues(self, values: Mapping[str, Any]) -> list[ConfigIssue]:
        """The flow rules, and text_encoder_precision 'fp8' refused by name: Gemma 3's LM head shares its weight with
        the token embedding, which fp8 casting then leaves in fp8 (its scaled embedding cannot compute in it)."""
        issues = super().option_issues(values)
        if values.get("text_encoder_precision") == "fp8":
            issues.append(ConfigIssue("text_encoder_precision", f"'fp8' does not work for {self.title}'s Gemma 3 (its "
                                      "LM head and token embedding share one weight, which fp8 storage breaks): use "
                                      "'int8' or 'nf4'", "precision"))
        return issues


def _gemma_file_issues(path: str) -> list[ConfigIssue]:
    """A text_encoder file that is not Gemma 3's in transformers' layout (Gemma 2 has no q_norm, Gemma 4 a
    layer_scalar), or holds it quantized with scales (ComfyUI's gemma_3_12B_it_fp8_scaled / fp4), named; a file
    that cannot be read is Validate's component check's to name."""
    try:
        shapes, _ = read_safetensors_header(Path(path).expanduser()) if path else ({}, {})
    except (OSError, ValueError):
        return []
    fix = "give ComfyUI's text_encoders/gemma_3_12B_it.safetensors (text_encoder_precision stores it in 8 or 4 bits)"
    if scale := layout.quantized(shapes):
        return [ConfigIssue("text_encoder", f"{Path(path).name} stores Gemma 3 quantized with scales ({scale}), "
                            f"which is not read here: {fix}", "model")]
    layers = {k.removeprefix("model.") for k in shapes if k.startswith(("model.layers.", "layers."))}
    gemma3 = {"layers.0.self_attn.q_norm.weight", "layers.0.post_feedforward_layernorm.weight"} <= layers
    if layers and (not gemma3 or "layers.0.layer_scalar" in layers):
        return [ConfigIssue("text_encoder", f"{Path(path).name} is a language model but not Gemma 3 (LTX-2's text "
                            f"encoder): {fix}", "model")]
    return []


LTX2 = LTX2Rules()
