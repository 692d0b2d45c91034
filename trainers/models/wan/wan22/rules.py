"""Wan 2.2 A14B text-to-video and image-to-video without its weights (torch-free): a WanPipeline (or
WanImageToVideoPipeline) folder with two experts (`transformer` for the high-noise steps, `transformer_2` for the
low-noise ones, switched at `boundary_ratio`), and the boundary a run trains with (musubi-tuner's
--timestep_boundary: a ratio 0-1 or a timestep above 1)."""
from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from trainers.core.errors import ConfigIssue
from trainers.core.memory_facts import (
    UMT5_XXL,
    UMT5_XXL_LINEAR,
    WAN21_VAE,
    WAN_14B,
    WAN_14B_LINEAR,
    WAN_14B_LORA_PER_RANK,
    WAN_14B_TOKENS,
    ModelSize,
)
from trainers.models.rules import ModelFiles
from trainers.models.wan.rules import WAN_14B_ACTIVATIONS, WanRules
from trainers.models.wan.split_files import SingleFiles

PIPELINES = ("WanPipeline", "WanImageToVideoPipeline")
T2V_BOUNDARY, I2V_BOUNDARY = 0.875, 0.9  # musubi-tuner's wan/configs (and Wan-AI's) boundaries per task


def boundary_ratio(value: float | None, folder_ratio: float | None, default: float = T2V_BOUNDARY) -> float:
    """The boundary as a ratio 0-1: `value` (timestep_boundary: a timestep when above 1, as musubi-tuner reads it),
    else the folder's boundary_ratio, else the task's default."""
    if value is None:
        return float(folder_ratio) if folder_ratio is not None else default
    return float(value) / 1000.0 if float(value) > 1 else float(value)


def _index(folder: Path) -> dict[str, Any]:
    try:
        index = json.loads((folder / "model_index.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return index if isinstance(index, dict) else {}


def folder_boundary(folder: Path) -> float | None:
    """The boundary_ratio a diffusers folder's model_index.json gives (None: none, or no readable index)."""
    value = _index(folder).get("boundary_ratio")
    return float(value) if isinstance(value, (int, float)) else None


def is_i2v_folder(folder: Path) -> bool:
    """Whether a diffusers folder is an image-to-video pipeline's (Wan 2.2 I2V A14B)."""
    return _index(folder).get("_class_name") == "WanImageToVideoPipeline"


class Wan22Rules(WanRules):
    name = "wan22"
    title = "Wan 2.2"
    detect_priority = 4  # above Wan 2.1's: the same pipeline, a second expert
    # both experts load (the one not trained renders samples), a LoRA on each (train_expert "both"); activations are
    # one expert's (Wan 2.1 14B's); blocks_to_swap counts the blocks of each expert (40)
    memory_facts = ModelSize(2 * WAN_14B, 2 * WAN_14B_LINEAR, UMT5_XXL, UMT5_XXL_LINEAR, WAN21_VAE,
                             2 * WAN_14B_LORA_PER_RANK, 0, 40, "the published Wan 2.2 T2V A14B sizes (two experts)",
                             *WAN_14B_ACTIVATIONS, tokens=WAN_14B_TOKENS)
    memory_variants = {}  # not Wan 2.1's 14B ("a14b" holds "14b")
    # the kind detection gives its I2V experts' files (36 channels, no image projection); a T2V expert's file has
    # Wan 2.1 T2V 14B's layout, read as an expert when model_family names wan22
    single_file_kind = "a14b_i2v"
    base_model_version = "wan22_t2v_a14b"
    modelspec_architecture = "wan2.2-t2v-a14b"

    @property
    def single_files(self) -> SingleFiles:
        from trainers.models.wan.wan22.pair_files import PAIR_FILES

        return PAIR_FILES

    def own_file_issues(self, name: str, shapes: Mapping[str, tuple[int, ...]],
                        files: ModelFiles) -> list[ConfigIssue]:
        from trainers.models.wan.wan22.pair_files import pair_issues

        return pair_issues(name, shapes, files.dit_high_noise) + super().own_file_issues(name, shapes, files)

    def with_own_files(self, model: Any, shapes: Mapping[str, tuple[int, ...]], files: ModelFiles,
                       weight_dtype: Any) -> Any:
        from trainers.models.wan.wan22.pair_files import with_high_noise_expert

        return with_high_noise_expert(model, shapes, files.dit_high_noise, weight_dtype)

    def claims_folder(self, index: dict[str, Any], unet_config: dict[str, Any], folder: Path) -> bool:
        """WanPipeline (T2V) and WanImageToVideoPipeline (I2V) folders with two WanTransformer3DModel experts and a
        boundary_ratio."""
        if str(index.get("_class_name", "")) not in PIPELINES:
            return False
        experts = [(index.get(name) or [None, None])[-1] for name in ("transformer", "transformer_2")]
        return experts == [self.transformer_class] * 2 and index.get("boundary_ratio") is not None

    def parked_share(self, values: Mapping[str, Any]) -> float:
        """The share of the pair's weights in host RAM while the other expert runs (the memory estimate's)."""
        return 0.5 if values.get("offload_inactive_dit") else 0.0

    def option_issues(self, values: Mapping[str, Any]) -> list[ConfigIssue]:
        issues = super().option_issues(values)
        value = values.get("timestep_boundary")
        if value is not None and not 0 < boundary_ratio(float(value), None) < 1:
            issues.append(ConfigIssue("timestep_boundary", f"{value!r} leaves one expert no timesteps: give a ratio "
                                      "between 0 and 1 or a timestep between 1 and 1000 (exclusive)", "flow"))
        processes = int(values.get("num_processes") or 1) * int(values.get("num_machines") or 1)
        if processes > 1 and values.get("train_expert", "both") == "both":
            issues.append(ConfigIssue("train_expert", "with several processes, train one expert per run ('high_noise' "
                                      "or 'low_noise'): a batch of one expert's timesteps leaves the other's LoRA "
                                      "without gradients, which DDP does not allow", "flow"))
        return issues + offload_issues(values, processes)

    def training_issues(self, trains: str, values: Mapping[str, Any]) -> list[ConfigIssue]:
        if trains != "full" or not values.get("offload_inactive_dit"):
            return []
        return [ConfigIssue("offload_inactive_dit", "keeps the expert not being called in CPU memory as a frozen copy, "
                            "which a full-weight run would lose the training of: turn it off (blocks_to_swap moves "
                            "trained weights too)", "precision")]


def offload_issues(values: Mapping[str, Any], processes: int) -> list[ConfigIssue]:
    """offload_inactive_dit with what moves weights already (musubi-tuner refuses block swap with it), compiled
    blocks, or several processes (DDP keeps every weight on its GPU)."""
    if not values.get("offload_inactive_dit"):
        return []
    issues = [ConfigIssue("offload_inactive_dit", f"and {name} both keep the experts' weights in CPU memory: keep one "
                          "(musubi-tuner refuses them together)", "precision")
              for name in ("blocks_to_swap", "layer_offload_fraction") if values.get(name)]
    if values.get("compile_blocks") == "on":
        issues.append(ConfigIssue("offload_inactive_dit", "moves the experts' weights between the CPU and the GPU, "
                                  "which compiled blocks were not checked with: set compile_blocks = 'auto' or 'off'",
                                  "precision"))
    if processes > 1:
        issues.append(ConfigIssue("offload_inactive_dit", "keeps an expert's weights in CPU memory, which works in one "
                                  "process only: set num_processes = 1", "precision"))
    return issues


WAN22 = Wan22Rules()
