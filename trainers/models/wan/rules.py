"""Wan 2.1 text-to-video without its weights (torch-free): how its diffusers folders are told apart, and the flow
options it reads (musubi-tuner's names and meanings for Wan: timestep_sampling, discrete_flow_shift,
weighting_scheme; no guidance embedding). Its frames follow the causal 3D VAE's rule, 1 + 4k."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from trainers.core.errors import ConfigIssue
from trainers.core.fsio import read_safetensors_header
from trainers.core.memory_facts import (
    UMT5_XXL,
    UMT5_XXL_LINEAR,
    WAN21_VAE,
    WAN_14B,
    WAN_14B_LINEAR,
    WAN_14B_LORA_PER_RANK,
    WAN_14B_TOKENS,
    WAN_1_3B_TOKENS,
    ModelSize,
)
from trainers.models.flow_rules import FlowRules, Part
from trainers.models.rules import CheckpointKeys, ModelFiles, ModelLoadError
from trainers.models.wan.split_files import scaled_fp8

# the 14B's former activation figures for one 81-frame clip at 832x480 (the 1.3B's scaled by width and depth); the
# estimate counts its sequence instead (WAN_14B_TOKENS: the frames and resolution of the run's windows)
WAN_14B_ACTIVATIONS = (832 * 480, 149.0, 13.8)
# Wan pipelines of diffusers that are not trained here yet, refused by name before anything loads
REFUSED_PIPELINES = {"WanImageToVideoPipeline": "a Wan image-to-video model",
                     "WanVACEPipeline": "a Wan VACE model", "WanVideoToVideoPipeline": "a Wan video-to-video pipeline",
                     "WanAnimatePipeline": "a Wan Animate model"}
# ComfyUI's split files beside a Wan 2.1 T2V diffusion_models file (wan/single_file.py reads them): UMT5-XXL and
# the autoencoder, each in a file of its own; UMT5's tokenizer is google/umt5-xxl's (WanPipeline's, musubi-tuner's)
SPLIT_PARTS = (Part("t5", "text_encoders.umt5xxl.", "text_encoder", "UMT5-XXL text encoder (ComfyUI's "
                    "umt5_xxl_fp16.safetensors)", tokenizer="google/umt5-xxl",
                    reader="trainers.models.wan.single_file"),
               Part("vae", "vae.", "ae", "autoencoder (ComfyUI's wan_2.1_vae.safetensors)",
                    reader="trainers.models.wan.single_file", denoiser_input=("patch_embedding.weight", 1),
                    file_keys=(("encoder.conv1.weight", "encoder.conv_in.weight"),  # Wan-AI's or diffusers'
                               ("conv2.weight", "post_quant_conv.weight"))))
# what each kind of Wan reference-layout file (wan_file_kind) is, for the refusal of the kinds not read; each Wan
# family's rules say the kind of its own files (single_file_kind): Wan 2.1 T2V's are read, the others refused
OTHER_FILES = {"i2v": "an image-to-video Wan model (36 input channels and an image projection)",
               "a14b_i2v": "an image-to-video Wan expert (36 input channels, no image projection)",
               "ti2v": "a 48-channel Wan model (the TI2V 5B)", "vace": "a Wan VACE model",
               "animate": "a Wan Animate model", "other": "a Wan model of another kind"}


def _t5_not_umt5(files: ModelFiles) -> list[ConfigIssue]:
    """A text_encoder file holding a T5 encoder (its relative attention bias in the first block only), not UMT5."""
    bias = "encoder.block.{}.layer.0.SelfAttention.relative_attention_bias.weight"
    path = Path(files.text_encoder).expanduser() if files.text_encoder else None
    try:
        names = read_safetensors_header(path)[0] if path is not None and path.suffix == ".safetensors" and \
            path.is_file() else {}
    except ValueError:
        return []  # a damaged file: the component checks name it
    if bias.format(0) in names and bias.format(1) not in names and "encoder.block.1.layer.0.layer_norm.weight" in names:
        return [ConfigIssue("text_encoder", f"{path.name} holds a T5 encoder (a relative attention bias in its first "
                            "block only), not the UMT5-XXL that Wan reads: give umt5_xxl_fp16.safetensors", "model")]
    return []


def _scaled_files(keys: CheckpointKeys, files: ModelFiles) -> list[ConfigIssue]:
    """The split files stored as scaled fp8, named with their option (Validate, before anything loads)."""
    found = [("pretrained_model_name_or_path", Path(keys.name), "the transformer")] if scaled_fp8(keys.shapes) else []
    for part in SPLIT_PARTS:
        path = Path(getattr(files, part.option)).expanduser() if getattr(files, part.option) else None
        try:
            if path is not None and path.is_file() and scaled_fp8(read_safetensors_header(path)[0]):
                found.append((part.option, path, f"the {part.what.split(' (')[0]}"))
        except ValueError:
            continue  # a damaged file: the component checks name it
    return [ConfigIssue(option, f"{path.name} stores {what} as scaled fp8 (ComfyUI's *_fp8_scaled files), which is "
                        "not read here: use its fp16/bf16 file (fp8_base and text_encoder_precision = 'fp8' keep "
                        "weights in 8 bits)", "model") for option, path, what in found]


def wan_file_kind(keys: CheckpointKeys) -> str:
    """What a Wan reference-layout file holds, told by its input channels (16: text-to-video, 36: image-to-video,
    48: TI2V 5B) and its own modules (the image projection of Wan 2.1 I2V, VACE's, Animate's). A Wan 2.2 T2V A14B
    expert's file has Wan 2.1 T2V 14B's layout and is read as that."""
    if keys.has("vace_blocks.") or any(".vace_blocks." in k for k in keys.shapes):
        return "vace"
    if any("motion_encoder." in k for k in keys.shapes):
        return "animate"
    patch = next((v for k, v in keys.shapes.items() if k.endswith("patch_embedding.weight")), ())
    channels = patch[1] if len(patch) > 1 else 0
    image = any("img_emb." in k for k in keys.shapes)
    return {16: "t2v", 36: "i2v" if image else "a14b_i2v", 48: "ti2v"}.get(channels, "other")


class WanRules(FlowRules):
    name = "wan21"
    title = "Wan 2.1"
    # the 1.3B counted from arch/ (diffusers 0.42.1); activations from its sequence (WAN_1_3B_TOKENS: latent frames x
    # each frame's tokens, by width and blocks), the figures for one 81-frame clip at 832x480 kept beside it
    memory_facts = ModelSize(1_418_996_800, 1_417_641_984, UMT5_XXL, UMT5_XXL_LINEAR, WAN21_VAE, 1_367_040, 0, 30,
                             "the published Wan 2.1 T2V 1.3B sizes", 832 * 480, 33.6, 3.1, tokens=WAN_1_3B_TOKENS)
    memory_variants = {("14b",): ModelSize(WAN_14B, WAN_14B_LINEAR, UMT5_XXL, UMT5_XXL_LINEAR, WAN21_VAE,
                                           WAN_14B_LORA_PER_RANK, 0, 40, "the published Wan 2.1 T2V 14B sizes",
                                           *WAN_14B_ACTIVATIONS, tokens=WAN_14B_TOKENS)}
    base_model_version = "wan21_t2v"  # musubi-tuner's ss_base_model_version (ARCHITECTURE_WAN "wan" + task)
    modelspec_architecture = "wan2.1-t2v"
    arch_dir = Path(__file__).with_name("arch")  # the published 1.3B configs (transformer/, vae/)
    pipeline_class = "WanPipeline"
    transformer_class = "WanTransformer3DModel"
    frozen_text_encoder = "UMT5"
    # the reference layout (Wan-AI's and ComfyUI's diffusion_models files): Wan 2.1 T2V's read with ComfyUI's
    # text_encoders and vae files beside it (text_encoder, ae); the other Wan models' files refused by name
    reference_prefixes = ("head.modulation", "model.diffusion_model.head.modulation", "diffusion_model.head.modulation")
    writes_single_files = False
    checkpoint_parts = SPLIT_PARTS
    # the video layer: clips train (video_directory datasets), frames come 1 + frame_rule x k (the causal 3D VAE)
    is_video = True
    frame_rule = 4
    frame_rate = 16.0  # Wan 2.1's frames per second (musubi-tuner drops source_fps to it)
    single_file_kind = "t2v"  # what its reference-layout files are (wan_file_kind)

    @property
    def reads_single_files(self) -> bool:  # type: ignore[override]
        """Wan 2.1 T2V's single files are read; the Wan families built on these rules refuse theirs by name."""
        return self.name == WanRules.name

    def claims_checkpoint(self, keys: CheckpointKeys) -> bool:
        """A Wan reference-layout file of this family's kind; Wan 2.1 T2V takes the kinds no Wan family claims,
        to name them."""
        return super().claims_checkpoint(keys) and (self.name == WanRules.name
                                                    or self.single_file_kind == wan_file_kind(keys))

    def checkpoint_issues(self, keys: CheckpointKeys, files: ModelFiles, vae_path: str = "") -> list[ConfigIssue]:
        kind = wan_file_kind(keys)
        if self.reads_single_files and kind != "t2v":
            return [ConfigIssue("pretrained_model_name_or_path", f"{Path(keys.name).name} is {OTHER_FILES[kind]}'s "
                                "single file, which Atelier does not read: give its diffusers folder or a Wan 2.1 "
                                "T2V diffusion_models file (wan2.1_t2v_1.3B_fp16.safetensors)", "model")]
        return _scaled_files(keys, files) or _t5_not_umt5(files) or super().checkpoint_issues(keys, files, vae_path)

    def denoiser_from_checkpoint(self, ckpt: Any, weight_dtype: Any) -> Any:
        from trainers.models.wan.single_file import transformer

        return transformer(ckpt, weight_dtype, self.title)

    def load_checkpoint(self, ckpt: Any, weight_dtype: Any, vae_path: str, files: ModelFiles) -> Any:
        """ComfyUI's split files (flow_checkpoint.py reads the parts through wan/single_file.py)."""
        from trainers.models.flow_checkpoint import load_flow_checkpoint
        from trainers.models.video import encode_images_as_frames

        model = load_flow_checkpoint(self, ckpt, weight_dtype, vae_path, files)
        encode_images_as_frames(model.vae)
        return model

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
