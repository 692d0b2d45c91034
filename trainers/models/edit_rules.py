"""What edit models (FLUX.1 Kontext, Qwen-Image-Edit) check before their weights load (torch-free): every training
image has its control images, no more than the model takes, and every sample prompt's --ci image is there."""
from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from trainers.core.errors import ConfigIssue
from trainers.data.edit_pairs import config_pair_issues


class EditRules:
    """The mixin of edit families' rules (before their base family's rules)."""

    title: str
    max_controls: int  # control images a target takes
    needs_input_image = False  # its pipeline draws from an input image only (every sample prompt needs --ci)

    def option_issues(self, values: Mapping[str, Any]) -> list[ConfigIssue]:
        issues = super().option_issues(values)  # type: ignore[misc]
        if str(values.get("reg_data_dir") or "").strip():
            issues.append(ConfigIssue("reg_data_dir", "has no control images, which every image of an edit model "
                                      "needs: clear it (a dataset_config subset with is_reg and its own "
                                      "control_directory can hold regularization pairs)", "dataset"))
        if values.get("validation_split"):
            issues.append(ConfigIssue("validation_split", f"is not available for {self.title} edit LoRAs yet (the "
                                      "held-out images would be scored without their controls): set it to 0",
                                      "dataset"))
        return issues + config_pair_issues(values, self.max_controls) + prompt_image_issues(
            values, self.max_controls, self.title if self.needs_input_image else "")


def prompt_image_issues(values: Mapping[str, Any], max_controls: int, needed_by: str = "") -> list[ConfigIssue]:
    """Sample prompts whose --ci images are missing or more than the model takes; without one, when `needed_by`
    (the model's title) draws from an input image only."""
    from trainers.core.prompts import config_prompts

    try:
        prompts = config_prompts(str(values.get("sample_prompts") or ""), list(values.get("sample_prompt_lines") or []))
    except ValueError:
        return []  # the sampling checks name a prompt that cannot be read
    issues = []
    for prompt in prompts:
        where = f"prompt {prompt.index + 1}"
        if needed_by and not prompt.edit_images:
            issues.append(ConfigIssue("sample_prompt_lines", f"{where} has no --ci image, which {needed_by} samples "
                                      "are drawn from: add `--ci path` (the image its edit starts from)", "sampling"))
        if len(prompt.edit_images) > max_controls:
            issues.append(ConfigIssue("sample_prompt_lines", f"{where} has {len(prompt.edit_images)} --ci images; "
                                      f"this model takes at most {max_controls}", "sampling"))
        issues += [ConfigIssue("sample_prompt_lines", f"{where}: --ci {path!r} is not an image file: give the path "
                               "of the image its edit starts from", "sampling")
                   for path in prompt.edit_images if not Path(path).expanduser().is_file()]
    return issues
