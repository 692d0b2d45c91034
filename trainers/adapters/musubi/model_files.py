"""What musubi-tuner's video family readers (wan.py, hunyuan_video15.py) do alike with a config's model files: those
not read here are refused by name and dropped, and the task's published diffusers folder is set where none is given
(torch-free)."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from trainers.adapters.kohya.keys import blank
from trainers.core.errors import ConfigIssue


def refuse_model_files(out: dict[str, Any], issues: list[ConfigIssue], names: Sequence[str], whose: str, task: str,
                       folder: str) -> list[str]:
    """Each of the options `names` the config gives is refused (`whose`: e.g. "Wan's model files (Wan-AI's or
    ComfyUI's)"), pointing to the task's diffusers `folder`; all of them leave `out`. The names given."""
    given = [name for name in names if not blank(out.get(name))]
    for name in given:
        issues.append(ConfigIssue(name, f"{name} = {out[name]!r} (musubi-tuner) is refused: {whose} are not read "
                                  f"here yet: give the diffusers folder (task {task}: {folder}) as "
                                  "pretrained_model_name_or_path"))
    for name in names:
        out.pop(name, None)
    return given


def set_published_folder(out: dict[str, Any], notes: list[str], task: str, folder: str) -> None:
    out["pretrained_model_name_or_path"] = folder
    notes.append(f"task = {task!r}: pretrained_model_name_or_path = {folder!r}, its published diffusers folder")
