"""Qwen-Image-Edit without its weights (torch-free): Qwen-Image's rules with one control image per target, which its
text encoder reads too, so captions cannot be encoded ahead of training."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from trainers.core.errors import ConfigIssue
from trainers.core.memory_facts import with_controls
from trainers.models.edit_rules import EditRules
from trainers.models.qwen_image.rules import QwenImageRules


class QwenImageEditRules(EditRules, QwenImageRules):
    name = "qwen_image_edit"
    title = "Qwen-Image-Edit"
    # one control image (Edit-2509/2511 take up to three: each adds the target's activations again)
    memory_facts = with_controls(QwenImageRules.memory_facts, 1, "the published Qwen-Image-Edit sizes")
    base_model_version = "qwen_image_edit"  # musubi-tuner's ss_base_model_version (ARCHITECTURE_QWEN_IMAGE_EDIT)
    modelspec_architecture = "Qwen-Image-Edit"
    pipeline_class = "QwenImageEditPipeline"
    detect_priority = 4
    reference_prefixes = ()  # its single files have Qwen-Image's keys
    needs_input_image = True  # QwenImageEditPipeline takes no prompt without an image
    max_controls = 1  # as musubi-tuner and the pipeline take

    def option_issues(self, values: Mapping[str, Any]) -> list[ConfigIssue]:
        issues = super().option_issues(values)
        if values.get("cache_text_encoder_outputs") and (values.get("flip_aug") or values.get("random_crop")):
            changing = "flip_aug" if values.get("flip_aug") else "random_crop"
            issues.append(ConfigIssue("cache_text_encoder_outputs", f"{self.title}'s text encoder reads each pair's "
                                      f"control image, which {changing} changes from epoch to epoch, so a pair's "
                                      f"encoding cannot be kept: turn {changing} or this off", "dataset"))
        return issues


class QwenImageEditPlusRules(QwenImageEditRules):
    name = "qwen_image_edit_plus"
    title = "Qwen-Image-Edit-2509/2511"
    # ss_base_model_version and modelspec.architecture: Qwen-Image-Edit's, as musubi-tuner writes them for both
    pipeline_class = "QwenImageEditPlusPipeline"
    max_controls = 3  # the issue's and musubi-tuner's advice; the pipeline takes any number


QWEN_IMAGE_EDIT = QwenImageEditRules()
QWEN_IMAGE_EDIT_PLUS = QwenImageEditPlusRules()
