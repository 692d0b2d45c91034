"""What edit models (FLUX.1 Kontext, Qwen-Image-Edit) check before their weights load (torch-free): every training
image has its control images, no more than the model takes, and every sample prompt's --ci image is there."""
from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from trainers.core.errors import BadInput, ConfigIssue
from trainers.data.dataset_toml import dataset_specs
from trainers.data.edit_pairs import (
    SIZING_OPTIONS,
    PairReport,
    control_folder,
    match_pairs,
    option_of,
    pair_issues,
    sizing_from_values,
)
from trainers.data.kohya_folders import scan_image_folder, scan_kohya_folders
from trainers.data.specs import SubsetSpec


class EditRules:
    """The mixin of edit families' rules (before their base family's rules)."""

    title: str
    max_controls: int  # control images a target takes
    needs_input_image = False  # its pipeline draws from an input image only (every sample prompt needs --ci)
    controls_optional = False  # it also trains from images alone (FLUX.2): an edit run when a control folder is named

    def option_issues(self, values: Mapping[str, Any]) -> list[ConfigIssue]:
        issues = super().option_issues(values)  # type: ignore[misc]
        images = prompt_image_issues(values, self.max_controls, self.title if self.needs_input_image else "")
        try:
            sizing_from_values(values)
        except ValueError as err:
            issues.append(ConfigIssue("control_resolution", str(err).removeprefix("control_resolution: "), "loss"))
        if self.controls_optional and not names_controls(values):
            issues += [ConfigIssue(name, f"sizes the control images of an edit run, and this {self.title} run has "
                                   "none: set control_directory, or clear it", "loss")
                       for name in SIZING_OPTIONS if values.get(name)]
            return issues + images
        if str(values.get("reg_data_dir") or "").strip():
            issues.append(ConfigIssue("reg_data_dir", "has no control images, which every image of an edit model "
                                      "needs: clear it (a dataset_config subset with is_reg and its own "
                                      "control_directory can hold regularization pairs)", "dataset"))
        if values.get("validation_split"):
            issues.append(ConfigIssue("validation_split", f"is not available for {self.title} edit LoRAs yet (the "
                                      "held-out images would be scored without their controls): set it to 0",
                                      "dataset"))
        return issues + config_pair_issues(values, self.max_controls) + images


def takes_controls(values: Mapping[str, Any]) -> int | None:
    """How many control images a run's model takes per target (0: it is not an edit model), as model_family or
    the model's local files say; None for a model that cannot be told (a hub id). The dataset readers below the
    models are handed it (trainers/data/dataset_toml.py)."""
    from trainers.models.checks import local_family
    from trainers.models.rules import rules_of

    name = str(values.get("model_family") or "auto")
    if name == "auto":
        name = local_family(str(values.get("pretrained_model_name_or_path") or "")) or ""
    try:
        return int(getattr(rules_of(name), "max_controls", 0)) if name else None
    except (KeyError, ValueError):
        return None


def names_controls(values: Mapping[str, Any]) -> bool:
    """Whether a config's dataset names a control folder (a subset's, or control_directory / conditioning_data_dir)."""
    try:
        return any(subset.controls is not None for spec in dataset_specs(values, [], takes_controls(values))
                   for subset in spec.subsets)
    except (BadInput, OSError, KeyError):  # KeyError: values without the dataset options, which name none
        return False


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


def config_pair_issues(values: Mapping[str, Any], max_controls: int) -> list[ConfigIssue]:
    """Every training subset's pairs checked (pair_issues) from a config's options, before a model loads; a subset
    without a control folder is named too. Dataset problems of another kind are left to the dataset checks."""
    issues = []
    for subset, report in _subset_pairs(values, max_controls):
        field = "dataset_config" if subset.label else option_of(values)
        if report is None:
            where = f"{subset.label or subset.field} ({subset.path})"
            issues.append(ConfigIssue(field, f"{where} has no control images: an edit model learns from pairs; "
                                             "set control_directory (or conditioning_data_dir) to the folder of "
                                             "the images each edit starts from", "dataset"))
        else:
            issues += pair_issues(report, field)
    return issues


def reference_count(values: Mapping[str, Any], max_controls: int) -> int:
    """The most control images a target of the config's dataset has (0: none named), up to the model's limit."""
    counts = [len(pair.controls) for _, report in _subset_pairs(values, max_controls) if report is not None
              for pair in report.pairs]
    return min(max(counts, default=0), max_controls)


def _subset_pairs(values: Mapping[str, Any], max_controls: int) -> Iterator[tuple[SubsetSpec, PairReport | None]]:
    """Each training subset (a kohya root's each part) with its pairs, None for one without a control folder; none
    at all for a dataset that cannot be read (the dataset checks name it)."""
    try:
        specs = dataset_specs(values, [], takes_controls(values))
        found = []
        # regularization images are pairs too (reg_data_dir, which has no control folder, is named by the model)
        for subset in (s for spec in specs for s in spec.subsets if s.field != "reg_data_dir"):
            if subset.controls is None or subset.kind not in ("kohya_root", "folder"):
                found.append((subset, None))
                continue
            scanned = (scan_kohya_folders(subset.path, subset.caption_extension).subsets
                       if subset.kind == "kohya_root" else
                       [scan_image_folder(subset.path, 1, "", subset.caption_extension)[0]])
            for part in scanned:
                folder = control_folder(subset.controls, part.folder, subset.kind == "kohya_root")
                found.append((subset, match_pairs([item.path for item in part.images], folder, max_controls,
                                                  subset.caption_extension)))
        return iter(found)
    except (BadInput, OSError):
        return iter(())
