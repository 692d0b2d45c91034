"""Dreambooth's rules (torch-free): a finetune's, plus what generating class images needs."""
from __future__ import annotations

from trainers.core.errors import ConfigIssue
from trainers.core.options import TrainConfig
from trainers.methods.finetune.rules import issues as full_weight_issues
from trainers.methods.finetune.rules import memory_tips, output_suffix, outputs  # noqa: F401 - the same as finetune's


def issues(cfg: TrainConfig) -> list[ConfigIssue]:
    found = full_weight_issues(cfg)
    if cfg.num_class_images:
        if not cfg.class_prompt.strip():
            found.append(ConfigIssue("class_prompt", "is needed to generate class images (num_class_images > 0), "
                                     "e.g. 'a photo of a dog'", "dataset"))
        if not cfg.reg_data_dir.strip():
            found.append(ConfigIssue("reg_data_dir", "is needed for class images: the folder they are read from "
                                     "(and generated into)", "dataset"))
    return found
