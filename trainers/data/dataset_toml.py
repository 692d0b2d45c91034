"""sd-scripts dataset configs (``--dataset_config``), loaded as they are.

    [general]                 # defaults for every dataset and subset
    shuffle_caption = true
    [[datasets]]              # resolution, batch size and buckets of its own
    resolution = 512          # or [768, 512]
    batch_size = 4
    enable_bucket = true
      [[datasets.subsets]]    # one image folder each
      image_dir = "/data/dog"
      class_tokens = "sks dog"
      num_repeats = 10
      [[datasets.subsets]]
      image_dir = "/data/reg_dog"
      class_tokens = "dog"
      is_reg = true

A value is looked up in the subset, then its dataset, then [general], then the run's own
options. Relative folders are read from the config file's folder (else the working directory).
Besides sd-scripts' keys a subset may have ``metadata_dir`` and the ``metadata_*`` filters.
``validation_split`` and ``validation_seed`` belong to [general] or a [[datasets]] (as in sd-scripts).
With masked_loss, an image_dir subset's ``conditioning_data_dir`` holds a mask image for each of
its images (same name, any image extension), as sd-scripts reads them; ``alpha_mask`` uses the
images' transparency instead. For edit models (FLUX.1 Kontext, Qwen-Image-Edit) a subset's ``control_directory``
(musubi-tuner's key), or its ``conditioning_data_dir`` without masked_loss, holds the control images
(trainers/data/edit_pairs.py).
musubi-tuner's video dataset configs (video_directory) are read by trainers/data/video_toml.py for video
families; here they are refused by name.
Torch-free.
"""
from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from trainers.core.options.loading import closest
from trainers.core.options.schema import ConfigError, ConfigIssue, coerce
from trainers.core.options.training import BY_NAME
from trainers.core.options.validation import parse_resolution
from trainers.data.checks import bucket_issues
from trainers.data.edit_pairs import sizing_from_values, sizing_refusals
from trainers.data.specs import DatasetSpec, SubsetSpec, bucket_settings, specs_from_values, subset_spec
from trainers.data.video_toml import is_video_dataset_config, read_dataset_toml

FIELD = "dataset_config"
# Subset-level keys that are also options of ours (same name, same meaning).
SUBSET_OPTIONS = (
    "caption_extension", "shuffle_caption", "keep_tokens", "keep_tokens_separator", "caption_dropout_rate",
    "caption_tag_dropout_rate", "caption_prefix", "caption_suffix", "flip_aug", "random_crop",
    "metadata_abs_min_score", "metadata_min_score", "metadata_tag_bonus", "metadata_blacklist_tags",
    "metadata_remove_tags", "metadata_tag_replacements", "metadata_tag_separator", "metadata_score_tags",
    "metadata_shuffle_tag_p", "metadata_consider_every_nth", "alpha_mask", "caption_separator", "secondary_separator",
    "enable_wildcard", "token_warmup_min", "token_warmup_step", "color_aug", "no_resize_control", "control_resolution",
)
SUBSET_ONLY = ("image_dir", "metadata_dir", "metadata_file", "num_repeats", "class_tokens", "is_reg",
               "conditioning_data_dir", "control_directory")
DATASET_OPTIONS = ("resolution", "enable_bucket", "min_bucket_reso", "max_bucket_reso", "bucket_reso_steps",
                   "bucket_no_upscale", "validation_split", "validation_seed")
RENAMED = {"batch_size": "train_batch_size"}  # sd-scripts dataset key -> our option
IGNORED = {  # sd-scripts keys without an effect here: loading warns about each
    "face_crop_aug_range": "face-crop augmentation is not available",
    "caption_dropout_every_n_epochs": "use caption_dropout_rate",
    "cache_info": "image sizes are read again each run (cheaply, from the headers)",
    "network_multiplier": "per-dataset network multipliers are not available",
    "debug_dataset": "use `python -m trainers preflight` to inspect a dataset",
}


def load_dataset_config(path: Path, values: Mapping[str, Any], warnings: list[str],
                        controls: int | None = None) -> list[DatasetSpec]:
    """The datasets of an sd-scripts dataset config; `values` are the run's options (the last defaults). `controls`
    is how many control images the run's model takes (trainers/models/edit_rules.py `takes_controls`; 0: none,
    None: not known): an edit model's subsets read conditioning_data_dir as their control images."""
    path = Path(path).expanduser()
    raw = read_dataset_toml(path)
    if is_video_dataset_config(raw):
        raise ConfigError([ConfigIssue(FIELD, f"{path.name} is a musubi-tuner video dataset config (video_directory "
                                       "or video_jsonl_file): clips train only with a video family (docs/video.md); "
                                       "this model trains on images: write an sd-scripts dataset config, or set "
                                       "train_data_dir to an image folder", "dataset")])
    issues: list[str] = []
    unknown_top = sorted(set(raw) - {"general", "datasets"})
    if unknown_top:
        issues.append(f"unknown top-level key(s) {', '.join(unknown_top)}; an sd-scripts dataset config has "
                      "[general] and [[datasets]] with [[datasets.subsets]]")
    general = _level(raw.get("general", {}), "[general]", SUBSET_OPTIONS + DATASET_OPTIONS + ("batch_size",),
                     issues, warnings)
    datasets = raw.get("datasets", [])
    if not isinstance(datasets, list) or not datasets:
        issues.append("no [[datasets]]: add at least one [[datasets]] with a [[datasets.subsets]] holding image_dir")
        datasets = []
    specs = []
    for d, dataset in enumerate(datasets, 1):
        where = f"[[datasets]] #{d}"
        subsets = dataset.get("subsets", []) if isinstance(dataset, dict) else []
        own = _level({k: v for k, v in dataset.items() if k != "subsets"} if isinstance(dataset, dict) else {},
                     where, SUBSET_OPTIONS + DATASET_OPTIONS + ("batch_size",), issues, warnings)
        merged = {**values, **general, **own}
        for issue in bucket_issues(merged["resolution"], merged["min_bucket_reso"], merged["max_bucket_reso"],
                                   merged["bucket_reso_steps"]) if merged["enable_bucket"] else []:
            issues.append(f"{where}: {issue.field}: {issue.message}")
        if not isinstance(subsets, list) or not subsets:
            issues.append(f"{where} has no [[datasets.subsets]]: add one with image_dir (or metadata_dir)")
            continue
        subset_specs = [_subset(s, f"{where} [[datasets.subsets]] #{i}", merged, path.parent, issues, warnings,
                                controls) for i, s in enumerate(subsets, 1)]
        split = merged.get("validation_split", 0.0)
        if split >= 1:
            issues.append(f"{where}: validation_split is {split}: that holds out every image; use a share below 1, "
                          "e.g. 0.1")
        if not issues:
            specs.append(DatasetSpec(bucket_settings(merged), merged["train_batch_size"],
                                     tuple(s for s in subset_specs if s is not None), where,
                                     split, merged.get("validation_seed")))
    if issues:
        raise ConfigError([ConfigIssue(FIELD, f"{path.name}: {message}", "dataset") for message in issues])
    return specs


def _level(table: Any, where: str, allowed: tuple[str, ...], issues: list[str], warnings: list[str],
           ) -> dict[str, Any]:
    """Check and coerce one table's keys into our option names."""
    if not isinstance(table, dict):
        issues.append(f"{where} must be a table of key = value")
        return {}
    out: dict[str, Any] = {}
    for key, value in table.items():
        if key in IGNORED:
            warnings.append(f"dataset_config {where}: {key} (sd-scripts) is ignored: {IGNORED[key]}")
            continue
        if key not in allowed:
            issues.append(_misplaced(key, where, allowed))
            continue
        name = RENAMED.get(key, key)
        try:
            out[name] = _resolution(value) if name in ("resolution", "control_resolution") else \
                coerce(BY_NAME[name], value)
        except ValueError as err:
            issues.append(f"{where}: {key}: {err}")
    return out


def _subset(table: Any, where: str, defaults: dict[str, Any], base: Path, issues: list[str],
            warnings: list[str], controls: int | None) -> SubsetSpec | None:
    if not isinstance(table, dict):
        issues.append(f"{where} must be a table")
        return None
    own = _level({k: v for k, v in table.items() if k not in SUBSET_ONLY}, where, SUBSET_OPTIONS, issues, warnings)
    values = {**defaults, **own}
    image_dir, metadata_dir = table.get("image_dir"), table.get("metadata_dir")
    repeats, tokens, is_reg = table.get("num_repeats", 1), table.get("class_tokens", ""), table.get("is_reg", False)
    if table.get("metadata_file") is not None:
        return _metadata_file_subset(table, where, values, base, issues)
    problems = []
    if bool(image_dir) == bool(metadata_dir):
        problems.append("needs image_dir (a folder of images) or metadata_dir (a folder of JSON files), not both")
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
        problems.append(f"num_repeats: got {repeats!r}; expected a whole number >= 1")
    if not isinstance(tokens, str) or not isinstance(is_reg, bool):
        problems.append("class_tokens must be text and is_reg true or false")
    folder = image_dir or metadata_dir
    if not isinstance(folder, str):
        problems.append("image_dir / metadata_dir must be text")
    masks_dir, controls_dir = table.get("conditioning_data_dir"), table.get("control_directory")
    if masks_dir is not None and controls_dir is None and not values.get("masked_loss") and controls:
        masks_dir, controls_dir = None, masks_dir  # an edit model's control images (sd-scripts' key)
    if masks_dir is not None:
        problems += _masks_problems(masks_dir, values, bool(metadata_dir))
    if controls_dir is not None:
        problems += _controls_problems(controls_dir, bool(metadata_dir), controls)
    problems += _sizing_problems(values, controls)
    if problems:
        issues.extend(f"{where}: {p}" for p in problems)
        return None
    found = _find(folder, base)
    masks = None if masks_dir is None else _find(masks_dir, base)
    controls = None if controls_dir is None else _find(controls_dir, base)
    missing = [name for name, got in ((folder, found), (masks_dir, masks), (controls_dir, controls))
               if name is not None and got is None]
    if missing:
        issues.extend(f"{where}: folder not found: {name} (relative folders are read from {base})" for name in missing)
        return None
    kind = "folder" if image_dir else "metadata"
    if kind == "metadata" and "num_repeats" not in table:
        repeats = values["dataset_repeats"]
    return subset_spec(kind, found, values, repeats=repeats, tokens=tokens, is_reg=is_reg, field=FIELD, label=where,
                       masks=masks, controls=controls)


def _metadata_file_subset(table: dict[str, Any], where: str, values: dict[str, Any], base: Path,
                          issues: list[str]) -> SubsetSpec | None:
    """A fine-tuning subset: sd-scripts' metadata_file (captions of every image) and the image_dir they are in."""
    file, image_dir, repeats = table["metadata_file"], table.get("image_dir"), table.get("num_repeats", 1)
    problems = []
    if not isinstance(file, str) or not file.strip():
        problems.append("metadata_file must be a file path (text)")
    if image_dir is not None and not isinstance(image_dir, str):
        problems.append("image_dir must be text")
    if table.get("metadata_dir"):
        problems.append("metadata_file and metadata_dir are two sources of captions: keep one")
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
        problems.append(f"num_repeats: got {repeats!r}; expected a whole number >= 1")
    if problems:
        issues.extend(f"{where}: {p}" for p in problems)
        return None
    path = Path(file).expanduser()
    path = path if path.is_absolute() or not (base / path).is_file() else base / path
    folder = _find(image_dir, base) if image_dir else Path(".")
    if not path.is_file() or folder is None:
        issues.append(f"{where}: not found: {file if not path.is_file() else image_dir} (relative paths are read "
                      f"from {base})")
        return None
    return subset_spec("metadata_file", folder, values, repeats=repeats, is_reg=bool(table.get("is_reg", False)),
                       field=FIELD, label=where, metadata_file=path)


def _masks_problems(masks_dir: Any, values: Mapping[str, Any], metadata: bool) -> list[str]:
    """A subset's conditioning_data_dir (masked_loss's mask images) against the rest of its settings."""
    if not isinstance(masks_dir, str) or not masks_dir.strip():
        return ["conditioning_data_dir must be a folder (text)"]
    if not values.get("masked_loss"):
        return ["conditioning_data_dir holds mask images for masked_loss, which is off: set masked_loss = true in "
                "the training config, or remove conditioning_data_dir"]
    if metadata:
        return ["conditioning_data_dir goes with image_dir (masks are found by the image's file name there), not "
                "with metadata_dir"]
    if values.get("alpha_mask"):
        return ["conditioning_data_dir and alpha_mask are two sources of the same mask: set alpha_mask = false for "
                "this subset, or remove conditioning_data_dir"]
    return []


def _controls_problems(controls_dir: Any, metadata: bool, controls: int | None) -> list[str]:
    """A subset's control_directory (an edit model's control images) against the rest of its settings."""
    if not isinstance(controls_dir, str) or not controls_dir.strip():
        return ["control_directory must be a folder (text)"]
    if metadata:
        return ["control_directory goes with image_dir (controls are found by the image's file name there), not "
                "with metadata_dir"]
    if controls == 0:
        return ["control_directory holds the control images of an edit model (FLUX.1 Kontext, Qwen-Image-Edit, "
                "FLUX.2); this model takes none: remove it, or train an edit model"]
    return []


def _sizing_problems(values: Mapping[str, Any], controls: int | None) -> list[str]:
    """A subset's no_resize_control / control_resolution: a readable resolution, for a model that takes controls."""
    refused = [f"{issue.field} {issue.message}" for issue in sizing_refusals(values, controls)]
    if refused:
        return refused
    try:
        sizing_from_values(values)
    except ValueError as err:
        return [str(err)]
    return []


def _find(folder: str, base: Path) -> Path | None:
    p = Path(folder).expanduser()
    for candidate in ([p] if p.is_absolute() else [base / p, p]):
        if candidate.is_dir():
            return candidate
    return None


def _resolution(value: Any) -> str:
    """sd-scripts writes 512, [768, 512] or "768,512"; ours is the text 'N' or 'W,H'."""
    if isinstance(value, list) and len(value) == 2 and all(isinstance(v, int) for v in value):
        value = f"{value[0]},{value[1]}"
    text = str(value) if isinstance(value, (int, str)) and not isinstance(value, bool) else repr(value)
    parse_resolution(text)
    return text


def _misplaced(key: str, where: str, allowed: tuple[str, ...]) -> str:
    if key in DATASET_OPTIONS + ("batch_size",):
        return f"{where}: {key} belongs to [[datasets]] or [general], not to a subset"
    if key in SUBSET_ONLY:
        return f"{where}: {key} belongs to a [[datasets.subsets]] entry"
    known = list(SUBSET_OPTIONS + SUBSET_ONLY + DATASET_OPTIONS + ("batch_size",)) + list(IGNORED)
    guess = closest(key, known)
    return f"{where}: unknown key {key!r}" + (f"; did you mean {guess!r}?" if guess else "")


def dataset_specs(values: Mapping[str, Any], warnings: list[str], controls: int | None = None) -> list[DatasetSpec]:
    """The run's datasets: from its dataset_config when set, else from the flat options. `controls`: how many
    control images the run's model takes (see `load_dataset_config`)."""
    config = str(values.get("dataset_config") or "").strip()
    if not config:
        return [specs_from_values(values)]
    for name in ("train_data_dir", "reg_data_dir", "metadata_dir"):
        if str(values.get(name) or "").strip():
            warnings.append(f"{name} is ignored: dataset_config is set (as in sd-scripts)")
    specs = load_dataset_config(Path(config), values, warnings, controls)
    issues = _caching_issues(specs, values) + _mask_issues(specs, values)
    if issues:
        raise ConfigError(issues)
    return specs


def _caching_issues(specs: list[DatasetSpec], values: Mapping[str, Any]) -> list[ConfigIssue]:
    """Subset settings that caching cannot honour (the flat options are checked by validation)."""
    issues = []
    for sub in (sub for spec in specs for sub in spec.subsets):
        for name in ("random_crop", "color_aug"):
            if getattr(sub, name) and (values["cache_latents"] or values["cache_latents_to_disk"]):
                issues.append(ConfigIssue("cache_latents", f"{sub.label} uses {name}, which changes every epoch: "
                                          f"turn latent caching or that {name} off", "dataset"))
        if values["cache_text_encoder_outputs"] and not sub.captions.is_fixed:
            issues.append(ConfigIssue("cache_text_encoder_outputs", f"{sub.label} shuffles or drops caption tags, or "
                                      "uses wildcards or token warmup, so its captions change as training goes: turn "
                                      "caching or those options off", "dataset"))
    return issues


def _mask_issues(specs: list[DatasetSpec], values: Mapping[str, Any]) -> list[ConfigIssue]:
    """masked_loss needs at least one subset with masks (the flat options are checked by validation)."""
    subsets = [sub for spec in specs for sub in spec.subsets]
    if not values.get("masked_loss") or any(sub.masks or sub.alpha_mask for sub in subsets):
        return []
    return [ConfigIssue("masked_loss", "is on, but no subset of dataset_config has masks: add conditioning_data_dir "
                        "(a folder with a mask image for each image) or alpha_mask = true to the subsets with masks, "
                        "or turn masked_loss off", "loss")]
