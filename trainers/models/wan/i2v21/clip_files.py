"""Wan 2.1 I2V's single files: its diffusion_models file (36 input channels and an image projection) with UMT5-XXL,
Wan 2.1's autoencoder and its CLIP image encoder in a file of its own (the `clip` option, musubi-tuner's --clip: the
layouts clip_encoder.py reads)."""
from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from trainers.core.errors import ConfigIssue
from trainers.core.fsio import pickle_problem
from trainers.models.wan.split_files import I2V_PARTS, SingleFiles, given, safetensors_shapes

I2V21_FILES = SingleFiles({"i2v": "Wan 2.1 I2V's file (36 input channels and an image projection)"},
                          "wan2.1_i2v_480p_14B_fp16.safetensors", I2V_PARTS, own_files=("clip",))

# the CLIP image encoder file layouts the `clip` option reads (clip_layout)
CLIP_LAYOUTS = {"transformers": "vision_model.embeddings.class_embedding",  # clip_vision_h, a folder's image_encoder
                "open_clip": "visual.transformer.resblocks.",  # OpenCLIP's ViT-H/14 (ComfyUI reads it too)
                "wan": "visual.transformer.0.attn.to_qkv."}  # Wan-AI's models_clip_*.pth (musubi-tuner's --clip)


def clip_layout(names: Iterable[str]) -> str:
    """A CLIP image encoder file's layout (a CLIP_LAYOUTS key), "" when it is none of them. Each may come without
    its top level (`vision_model.`: transformers 5 saves none; `visual.`)."""
    names = list(names)
    return next((layout for layout, marker in CLIP_LAYOUTS.items()
                 if any(k.startswith((marker, marker.split(".", 1)[1])) for k in names)), "")


def clip_issues(keys_name: str, clip: str) -> list[ConfigIssue]:
    """Wan 2.1 I2V's CLIP image encoder beside its model file (the `clip` option, musubi-tuner's --clip)."""
    path = given(clip)
    if path is None:
        return [ConfigIssue("clip", f"{Path(keys_name).name} holds the Wan 2.1 I2V denoiser but not its CLIP image "
                            "encoder: set clip to ComfyUI's clip_vision/clip_vision_h.safetensors (or Wan-AI's "
                            "models_clip_open-clip-xlm-roberta-large-vit-huge-14.pth, musubi-tuner's --clip)",
                            "model")]
    if not path.is_file():
        return []  # the option's own path check names it
    if path.suffix.lower() != ".safetensors":
        problem = pickle_problem(path)
        return [ConfigIssue("clip", problem, "model")] if problem else []
    names = safetensors_shapes(path)
    if names is None or clip_layout(names):
        return []  # a damaged file: named when it loads
    return [ConfigIssue("clip", f"{path.name} holds no CLIP vision encoder (vision_model.encoder.layers..., OpenCLIP's "
                        "visual.transformer.resblocks... or Wan-AI's visual.transformer...): give ComfyUI's "
                        "clip_vision_h.safetensors", "model")]

