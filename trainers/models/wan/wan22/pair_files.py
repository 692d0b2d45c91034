"""The Wan 2.2 A14B pair's single files: the low-noise expert's diffusion_models file as the model (musubi-tuner's
dit) and the high-noise expert's beside it (dit_high_noise), with UMT5-XXL and Wan 2.1's autoencoder. A T2V expert's
file has Wan 2.1 T2V 14B's layout (detection gives it Wan 2.1; model_family = 'wan22' reads it as an expert)."""
from __future__ import annotations

import copy
import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from trainers.core.errors import ConfigIssue
from trainers.models.wan.split_files import (
    I2V_PARTS,
    SingleFiles,
    describe_kind,
    given,
    reference_shapes,
    safetensors_shapes,
    scaled_fp8,
    wan_file_kind,
)

PAIR_FILES = SingleFiles({"a14b_i2v": "a Wan 2.2 I2V A14B expert's file (36 input channels, no image projection)",
                          "t2v": ""},  # a T2V expert's file: Wan 2.1 T2V 14B's layout, described by Wan 2.1
                         "wan2.2_t2v_low_noise_14B_fp16.safetensors with dit_high_noise = "
                         "wan2.2_t2v_high_noise_14B_fp16.safetensors", I2V_PARTS, own_files=("dit_high_noise",))


def pair_issues(keys_name: str, shapes: Mapping[str, tuple[int, ...]], high_noise: str) -> list[ConfigIssue]:
    """The high-noise expert's file of a Wan 2.2 A14B pair (dit_high_noise, musubi-tuner's name) beside the low-noise
    one (the model file, musubi-tuner's dit): given, a Wan file of the same kind and sizes, not scaled fp8."""
    model, kind = Path(keys_name).name, wan_file_kind(shapes)
    example = "wan2.2_i2v_high_noise_14B_fp16.safetensors" if kind == "a14b_i2v" else \
        "wan2.2_t2v_high_noise_14B_fp16.safetensors"
    path = given(high_noise)
    if path is None:
        return [ConfigIssue("dit_high_noise", f"{model} is one expert of a Wan 2.2 A14B pair (musubi-tuner's dit: "
                            f"the low-noise one): set dit_high_noise to the high-noise expert's file ({example})",
                            "model")]
    if not path.is_file():
        return []  # the option's own path check names it
    theirs = safetensors_shapes(path) if path.suffix.lower() == ".safetensors" else None
    if theirs is None:
        return [ConfigIssue("dit_high_noise", f"{path.name} is not a .safetensors file: give the high-noise "
                            f"expert's diffusion_models file ({example})", "model")]
    ours = reference_shapes(shapes)
    high = reference_shapes(theirs)
    if scaled_fp8(high):
        return [ConfigIssue("dit_high_noise", f"{path.name} stores the expert as scaled fp8 (ComfyUI's *_fp8_scaled "
                            "files), which is not read here: use its fp16 file and set fp8_base to train in fp8",
                            "model")]
    if "patch_embedding.weight" not in high:
        return [ConfigIssue("dit_high_noise", f"{path.name} is not a Wan diffusion_models file (no patch_embedding): "
                            f"give the high-noise expert's ({example})", "model")]
    if wan_file_kind(high) != kind:
        return [ConfigIssue("dit_high_noise", f"{path.name} is {describe_kind(wan_file_kind(high))}, but {model} is "
                            f"{describe_kind(kind)}: give the two experts of one Wan 2.2 pair ({example})", "model")]
    if high != ours:
        return [ConfigIssue("dit_high_noise", f"{path.name} has other sizes than {model} (the experts of a Wan 2.2 "
                            f"pair have the same): give the high-noise expert of the same pair ({example})", "model")]
    return []


def with_high_noise_expert(model: Any, shapes: Mapping[str, tuple[int, ...]], path: str, weight_dtype: Any) -> Any:
    """The LoadedModel `model` (the low-noise expert's) as the pair (experts.py) with the high-noise expert's file, at
    the task's boundary (musubi-tuner's: T2V 0.875, I2V 0.9; timestep_boundary sets the run's)."""
    from trainers.models.single_file.checkpoint import open_checkpoint
    from trainers.models.wan.single_file import transformer
    from trainers.models.wan.wan22.experts import ExpertPair

    family = copy.copy(model.family)
    high = transformer(open_checkpoint(path), weight_dtype, f"{family.title} high-noise")
    family.i2v = wan_file_kind(shapes) == "a14b_i2v"
    family.folder_ratio = None  # a diffusion_models file has no boundary_ratio
    family.boundary = family.default_boundary
    return dataclasses.replace(model, family=family, unet=ExpertPair(high, model.unet, family.boundary))
