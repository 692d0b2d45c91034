"""Distilled ("turbo") bases: which one a config's model is, told from its files (each family's rules'
`distilled_base`), and how it is trained. Torch-free: Validate and the run say the same.

A step-distilled model (FLUX.1 schnell, Z-Image Turbo, Krea 2 Turbo, FLUX.2 klein's distilled checkpoints) samples
in a few steps; a LoRA trained on it directly learns to undo the distillation as well, and renders blurred at those
steps. Where the model's authors or peers publish a de-distillation "training adapter" (ostris' adapters, which
ai-toolkit applies through `assistant_lora_path`), `training_adapter` applies it to the frozen base while training
only (trainers/models/training_adapter.py): the trained LoRA then learns the concept alone, and is saved and sampled
without the adapter. Without one, training is allowed and warned about by name.
"""
from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from trainers.core.errors import ConfigIssue
from trainers.core.fsio import read_safetensors_header
from trainers.core.options.training import family_declaration
from trainers.core.paths import path_problem
from trainers.models.checks import MODEL, given_path, local_family
from trainers.models.rules import DistilledBase, ModelLoadError, rules_of

ADAPTER = "training_adapter"
MULTIPLIER = "training_adapter_multiplier"
LORA_SUFFIXES = (".lora_A.weight", ".lora_B.weight", ".lora_down.weight", ".lora_up.weight")


def distilled_base(values: Mapping[str, Any], model: Path | None = None) -> DistilledBase | None:
    """The distilled variant the config's model is (a local folder or file; `model`: a hub id's fetched folder),
    or None when it is not one or cannot be told before it is fetched."""
    path = model or given_path(values, MODEL)
    if path is None:
        return None
    name = local_family(str(path))
    if name is None:
        return None
    try:
        return rules_of(name).distilled_base(path)
    except (ModelLoadError, OSError, ValueError):
        return None


def adapter_path(values: Mapping[str, Any]) -> Path | None:
    """The training adapter's file, when one is set."""
    text = str(values.get(ADAPTER) or "").strip()
    return Path(text).expanduser() if text else None


def distilled_notes(values: Mapping[str, Any], model: Path | None = None) -> list[str]:
    """What Validate and the run say about a distilled base: the handling chosen (an info line), or, without an
    adapter, that it may lose its speed and which adapter to download."""
    found = distilled_base(values, model)
    if found is None:
        return []
    said = f"{found.variant} is a distilled base ({found.told_by})"
    adapter = adapter_path(values)
    if adapter is not None:
        weight = float(values.get(MULTIPLIER, 1.0))
        return [f"{said}: trained with the training adapter {adapter.name} x {weight:g}, applied to the frozen base "
                "while training and left out of the saves and the samples (which show what the saved LoRA gives on "
                f"{found.variant})"]
    if found.adapter:
        return [f"{said}, trained without a training adapter: the trained weights may lose its few-step speed "
                f"(the distillation breaks down). Download {found.adapter} and set {ADAPTER} to it"]
    return [f"{said}, trained without a training adapter (none is published for it): the trained weights may lose "
            f"its few-step speed. Better: {found.without}"]


def adapter_issues(values: Mapping[str, Any], model: Path | None = None) -> list[ConfigIssue]:
    """training_adapter refused by name: a file that is not a LoRA (nor a whole one), or a base that is not
    distilled (its files tell)."""
    adapter = adapter_path(values)
    if adapter is None or path_problem(str(adapter), "file") or not adapter.is_file():
        return []  # unset, or named by the option checks (missing, not a file...)
    try:
        shapes, _ = read_safetensors_header(adapter, whole=True)
    except ValueError as err:
        return [ConfigIssue(ADAPTER, f"{adapter} cannot be read as a LoRA .safetensors file: {err}", "flow")]
    if not any(key.endswith(LORA_SUFFIXES) for key in shapes):
        return [ConfigIssue(ADAPTER, f"{adapter} holds no LoRA weights (lora_A/lora_B or lora_down/lora_up): give the "
                            "training adapter's .safetensors file", "flow")]
    path = model or given_path(values, MODEL)
    name = local_family(str(path)) if path is not None else None
    if path is None or name is None:
        return []  # a hub id is checked once fetched; a model that cannot be told is named by the model checks
    declared, rules = family_declaration(name), rules_of(name)
    reads = declared is not None and ADAPTER in declared.reads  # the other families refuse the option itself
    if reads and rules.tells_distilled(path) and distilled_base(values, model) is None:
        return [ConfigIssue(ADAPTER, f"is for distilled (turbo) bases, but {path} is a {rules.title} model that is "
                            "not distilled (its files tell): leave it empty", "flow")]
    return []
