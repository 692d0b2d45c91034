"""Generate's LoRA files of a Wan model. On the Wan 2.2 A14B pair each expert's LoRA goes on its expert, as diffusers'
WanPipeline loads them (the high-noise file into `transformer`, the low-noise one with load_into_transformer_2=True):
a file of a pair (`<name>_high_noise.safetensors`) brings its other half when that file is beside it and the job does
not list it itself, the run's own file (both experts under `lora_unet_high_noise_...` / `lora_unet_low_noise_...`)
is split, and a one-expert run's file (ss_train_expert) goes on that expert only. The other families' models refuse
such a file by name (own_lora_file) instead of loading an expert's LoRA as if it were their own."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from trainers.core.fsio import read_safetensors_header
from trainers.models.pipeline_lora import PipelinePart
from trainers.models.rules import ModelLoadError
from trainers.models.wan.wan22.experts import EXPERT_NAMES, ExpertPair

PREFIX = "lora_unet_"
LOAD_KWARGS: dict[str, tuple[tuple[str, Any], ...]] = {"high_noise": (), "low_noise": (("load_into_transformer_2", True),)}


def _mark(expert: str) -> str:
    return f"{PREFIX}{expert}_"


@dataclass(frozen=True)
class ExpertPart(PipelinePart):
    """One expert's LoRA: a file of its own, or its keys in the run's file of both (`in_both`)."""

    expert: str = ""
    in_both: bool = False

    def own_keys(self, state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        mark = _mark(self.expert)
        if self.in_both:
            return {k: v for k, v in state.items() if k.startswith(mark)}
        return {mark + k.removeprefix(PREFIX) if k.startswith(PREFIX) else k: v for k, v in state.items()}

    def pipeline_keys(self, state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        mark = _mark(self.expert)
        return {PREFIX + k.removeprefix(mark) if k.startswith(mark) else k: v for k, v in state.items()}


def _part(path: Path, expert: str, in_both: bool = False) -> ExpertPart:
    return ExpertPart(path, LOAD_KWARGS[expert], expert, in_both)


def expert_parts(path: Path, listed: Sequence[Path] = ()) -> tuple[list[ExpertPart], str] | None:
    """The experts' LoRAs a file holds or brings, and what told it; None: not a LoRA of the pair's experts."""
    keys, metadata = read_safetensors_header(path)
    both = [e for e in EXPERT_NAMES if any(k.startswith(_mark(e)) for k in keys)]
    if both:
        return [_part(path, e, in_both=True) for e in both], "the run's file of both experts"
    trained = metadata.get("ss_train_expert")
    if trained in EXPERT_NAMES:
        return [_part(path, trained)], f"trained with train_expert = {trained}"
    for expert in EXPERT_NAMES:
        if path.stem.endswith(f"_{expert}"):
            other = next(e for e in EXPERT_NAMES if e != expert)
            sibling = path.with_name(f"{path.stem.removesuffix(expert)}{other}{path.suffix}")
            parts = [_part(path, expert)]
            if sibling.is_file() and sibling not in listed:
                parts.append(_part(sibling, other))
            return sorted(parts, key=lambda p: EXPERT_NAMES.index(p.expert)), f"its name ends in _{expert}"
    return None


class ExpertLoras:
    """Mixed into the Wan 2.2 family: the pair's LoRAs onto its experts; the other families refuse them (base.py's
    own_lora_file)."""

    title: str

    def own_lora_file(self, path: Path) -> str | None:
        try:
            found = expert_parts(path) if path.is_file() else None
        except (OSError, ValueError):  # not a safetensors file: not one of the pair's
            return None
        if found is None:
            return None
        parts, told = found
        experts = " and ".join(p.expert.replace("_", "-") for p in parts)
        return f"a LoRA of Wan 2.2 A14B's {experts} expert{'s' if len(parts) > 1 else ''} ({told})"

    def lora_pipeline_parts(self, path: Path, listed: Sequence[Path], model: Any) -> list[PipelinePart]:
        found = expert_parts(path, listed)
        if found is None:
            return [PipelinePart(path)]
        parts, told = found
        if not isinstance(model.unet, ExpertPair):
            raise ModelLoadError(f"loras: {path.name} is {self.own_lora_file(path)}, and this model has one of its "
                                 "experts only: load the pair (both experts) it was trained on")
        return list(parts)
