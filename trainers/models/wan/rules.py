"""Wan 2.1 text-to-video without its weights (torch-free): how its diffusers folders are told apart, and the flow
options it reads (musubi-tuner's names and meanings for Wan: timestep_sampling, discrete_flow_shift,
weighting_scheme; no guidance embedding). Its frames follow the causal 3D VAE's rule, 1 + 4k."""
from __future__ import annotations

from collections.abc import Mapping
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
from trainers.models.flow_rules import FlowRules
from trainers.models.rules import CheckpointKeys, ModelFiles, ModelLoadError, checkpoint_rules
from trainers.models.wan.split_files import (  # noqa: F401 - SPLIT_PARTS re-exported
    SPLIT_PARTS,
    T2V_FILES,
    SingleFiles,
    describe_kind,
    folder_file_issues,
    scaled_fp8,
    unread_file_issues,
    wan_file_kind,
)

# the 14B's former activation figures for one 81-frame clip at 832x480 (the 1.3B's scaled by width and depth); the
# estimate counts its sequence instead (WAN_14B_TOKENS: the frames and resolution of the run's windows)
WAN_14B_ACTIVATIONS = (832 * 480, 149.0, 13.8)
# Wan pipelines of diffusers that are not trained here yet, refused by name before anything loads
REFUSED_PIPELINES = {"WanImageToVideoPipeline": "a Wan image-to-video model",
                     "WanVACEPipeline": "a Wan VACE model", "WanVideoToVideoPipeline": "a Wan video-to-video pipeline",
                     "WanAnimatePipeline": "a Wan Animate model"}

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
    # the reference layout (Wan-AI's and ComfyUI's diffusion_models files), read with ComfyUI's text_encoders and vae
    # files beside it (text_encoder, ae); what each Wan family reads: its single_files
    reference_prefixes = ("head.modulation", "model.diffusion_model.head.modulation", "diffusion_model.head.modulation")
    writes_single_files = False
    # the video layer: clips train (video_directory datasets), frames come 1 + frame_rule x k (the causal 3D VAE)
    is_video = True
    frame_rule = 4
    frame_rate = 16.0  # Wan 2.1's frames per second (musubi-tuner drops source_fps to it)
    single_file_kind = "t2v"  # the kind (wan_file_kind) detection gives it

    @property
    def single_files(self) -> SingleFiles:
        """What this family reads as its single files (a Wan family's rules declare their own)."""
        return T2V_FILES

    @property
    def checkpoint_parts(self) -> tuple[Any, ...]:  # type: ignore[override]
        return self.single_files.parts

    def claims_checkpoint(self, keys: CheckpointKeys) -> bool:
        """A Wan reference-layout file of this family's kind; Wan 2.1 T2V takes the kinds no Wan family claims,
        to name them."""
        return super().claims_checkpoint(keys) and (self.name == WanRules.name
                                                    or self.single_file_kind == wan_file_kind(keys.shapes))

    def claims_named_checkpoint(self, keys: CheckpointKeys) -> bool:
        """Any Wan reference-layout file: checkpoint_issues names one of another kind (Wan 2.2's pair reads T2V
        experts' files, which detection alone gives Wan 2.1 T2V)."""
        return super().claims_checkpoint(keys)

    def checkpoint_issues(self, keys: CheckpointKeys, files: ModelFiles, vae_path: str = "") -> list[ConfigIssue]:
        if other := self._other_kind(keys):
            return [other]
        own = self.own_file_issues(keys.name, keys.shapes, files)
        return _scaled_files(keys, files) or _t5_not_umt5(files) or own or super().checkpoint_issues(keys, files,
                                                                                                     vae_path)

    def _other_kind(self, keys: CheckpointKeys) -> ConfigIssue | None:
        """A Wan file of a kind this family does not read, named with the family that does (if any)."""
        kind = wan_file_kind(keys.shapes)
        if kind in self.single_files.kinds:
            return None
        name, ours = Path(keys.name).name, f"{self.title}'s ({self.single_files.example})"
        detected = checkpoint_rules(keys.shapes, keys.name)
        if isinstance(detected, WanRules) and kind in detected.single_files.kinds:
            return ConfigIssue("pretrained_model_name_or_path", f"{name} is {describe_kind(kind)}, not {ours}: set "
                               f"model_family = 'auto' to train it as {detected.title}, or give {self.title}'s file",
                               "model")
        return ConfigIssue("pretrained_model_name_or_path", f"{name} is {describe_kind(kind)}, which Atelier does not "
                           f"read: give its diffusers folder, or {ours}", "model")

    def own_file_issues(self, name: str, shapes: Mapping[str, tuple[int, ...]],
                        files: ModelFiles) -> list[ConfigIssue]:
        """The files of its own beside its model file (single_files.own_files), checked by the family that reads
        them; the other Wan families' options of such files refused where set."""
        return unread_file_issues(files, self.title, self.single_files.own_files)

    def with_own_files(self, model: Any, shapes: Mapping[str, tuple[int, ...]], files: ModelFiles,
                       weight_dtype: Any) -> Any:
        """The LoadedModel of its single files with the files of its own beside them (none here)."""
        return model

    def option_issues(self, values: Mapping[str, Any]) -> list[ConfigIssue]:
        model = str(values.get("pretrained_model_name_or_path") or "").strip()
        folder = bool(model) and Path(model).expanduser().is_dir()
        own = folder_file_issues(ModelFiles.from_values(values), self.title) if folder else []
        return super().option_issues(values) + own

    def denoiser_from_checkpoint(self, ckpt: Any, weight_dtype: Any) -> Any:
        from trainers.models.wan.single_file import transformer

        return transformer(ckpt, weight_dtype, self.title)

    def load_checkpoint(self, ckpt: Any, weight_dtype: Any, vae_path: str, files: ModelFiles) -> Any:
        """ComfyUI's split files (single_file_load.py; flow_checkpoint.py reads the parts through single_file.py)."""
        from trainers.models.wan.single_file_load import load_split_files

        return load_split_files(self, ckpt, weight_dtype, vae_path, files)

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
