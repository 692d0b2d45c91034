"""Generate's video side, torch-free: whether a job's model is a video family (told before anything loads, from
model_family or the model's own files, as Validate tells it), so its plan names clips (.mp4) and the page offers
the frames field; and the frames each prompt renders (its --f, else the job's frames, else the family's own).
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from trainers.core.errors import BadInput
from trainers.core.fsio import read_safetensors_header
from trainers.core.registry import FAMILY_NAMES

CLIP_SUFFIX = ".mp4"


def model_rules(model: str, model_family: str = "auto") -> Any | None:
    """The family rules of a model (FamilyRules), None when they cannot be told without loading it (a hub id not
    fetched, a file of no family, a path that is not there)."""
    from trainers.models.rules import SINGLE_FILE_SUFFIXES, checkpoint_rules, folder_rules, rules_of

    if model_family in FAMILY_NAMES:
        return rules_of(model_family)
    path = Path(model.strip()).expanduser() if model.strip() else None
    try:
        if path is not None and not path.exists() and (cached := _hub_folder(model.strip())) is not None:
            path = cached
        if path is not None and (path / "model_index.json").is_file():
            return folder_rules(path)
        if path is not None and path.is_file() and path.suffix.lower() in SINGLE_FILE_SUFFIXES[:1]:
            return checkpoint_rules(read_safetensors_header(path)[0], str(path))
    except (BadInput, OSError, ValueError):
        return None
    return None


def _hub_folder(repo_id: str) -> Path | None:
    """The local snapshot of a hub id (org/name) already in the Hugging Face cache, without asking the hub."""
    if not re.fullmatch(r"[\w.-]+/[\w.-]+", repo_id):
        return None
    from huggingface_hub import try_to_load_from_cache

    found = try_to_load_from_cache(repo_id, "model_index.json")
    return Path(found).parent if isinstance(found, str) else None


def is_video_model(model: str, model_family: str = "auto") -> bool:
    """The model renders clips (a video family's: Wan, HunyuanVideo 1.5, LTX-2)."""
    rules = model_rules(model, model_family)
    return bool(rules is not None and rules.is_video)


def output_suffix(model: str, model_family: str = "auto") -> str:
    """What the job's files are: clips of a video family, PNGs otherwise."""
    return CLIP_SUFFIX if is_video_model(model, model_family) else ".png"
