"""What a run's data is made of, before any file is read: datasets and their subsets.

A flat config gives one dataset (train_data_dir, reg_data_dir, metadata_dir); an sd-scripts
dataset config gives several. Both become the same specs here. Torch-free.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from trainers.core.options.validation import parse_resolution
from trainers.data.buckets import BucketSettings
from trainers.data.captions import CaptionOptions
from trainers.data.edit_pairs import ControlSizing, sizing_from_values
from trainers.data.metadata_json import MetadataFilters, parse_replacements, parse_score_tags, parse_tag_bonus

SubsetKind = Literal["kohya_root", "folder", "metadata", "metadata_file"]


@dataclass(frozen=True)
class SubsetSpec:
    kind: SubsetKind  # kohya_root: <repeats>_<tokens> subfolders; folder: images inside; metadata: JSON tree
    path: Path
    repeats: int
    tokens: str  # class tokens: the caption of an image without a caption file
    is_reg: bool
    caption_extension: str
    captions: CaptionOptions
    flip_aug: bool
    random_crop: bool
    metadata: MetadataFilters | None
    field: str  # the config field to name in messages
    label: str = ""  # where in a dataset config it was declared
    alpha_mask: bool = False  # the images' alpha channel weights the loss
    masks: Path | None = None  # masked_loss: mask images (for a kohya root, in the same subfolders)
    color_aug: bool = False  # hue or gamma jitter of a third of the samples
    metadata_file: Path | None = None  # kind metadata_file: sd-scripts' one JSON of captions (path: its image folder)
    caption_files: bool = False  # kind metadata_file: captions from the files beside the images (in_json_from_captions)
    controls: Path | None = None  # an edit model's control images (trainers/data/edit_pairs.py; a kohya root's in
    # the same subfolders, else the folder itself)
    control_sizing: ControlSizing = ControlSizing()  # no_resize_control and control_resolution


@dataclass(frozen=True)
class DatasetSpec:
    buckets: BucketSettings
    batch_size: int
    subsets: tuple[SubsetSpec, ...]
    label: str = ""
    validation_split: float = 0.0  # share of each (non-regularization) subset's images held out
    validation_seed: int | None = None  # of the split's shuffle (None: the run's seed)


def caption_options(values: Mapping[str, Any], metadata: bool) -> CaptionOptions:
    separator = values["metadata_tag_separator"] if metadata else ", "
    shuffle = 1.0 if values["shuffle_caption"] else (values["metadata_shuffle_tag_p"] if metadata else 0.0)
    return CaptionOptions(
        split_on=(separator.strip() or separator) if metadata else values["caption_separator"] or ",",
        join_with=separator, shuffle_p=shuffle,
        keep_tokens=values["keep_tokens"], keep_tokens_separator=values["keep_tokens_separator"],
        dropout_rate=values["caption_dropout_rate"], tag_dropout_rate=values["caption_tag_dropout_rate"],
        prefix=values["caption_prefix"], suffix=values["caption_suffix"],
        secondary_separator=values["secondary_separator"], wildcard=values["enable_wildcard"],
        strict=values.get("strict_captions", False),
        token_warmup_min=values["token_warmup_min"], token_warmup_step=values["token_warmup_step"])


def metadata_filters(values: Mapping[str, Any]) -> MetadataFilters:
    return MetadataFilters(
        abs_min_score=values["metadata_abs_min_score"], min_score=values["metadata_min_score"],
        tag_bonus=parse_tag_bonus(values["metadata_tag_bonus"]),
        blacklist=frozenset(values["metadata_blacklist_tags"]), remove=frozenset(values["metadata_remove_tags"]),
        replacements=parse_replacements(values["metadata_tag_replacements"]),
        separator=values["metadata_tag_separator"], score_tags=parse_score_tags(values["metadata_score_tags"]),
        consider_every_nth=values["metadata_consider_every_nth"])


def bucket_settings(values: Mapping[str, Any]) -> BucketSettings:
    return BucketSettings(parse_resolution(values["resolution"]), values["enable_bucket"], values["min_bucket_reso"],
                          values["max_bucket_reso"], values["bucket_reso_steps"], values["bucket_no_upscale"])


def subset_spec(kind: SubsetKind, path: Path, values: Mapping[str, Any], *, repeats: int = 1, tokens: str = "",
                is_reg: bool = False, field: str, label: str = "", masks: Path | None = None,
                metadata_file: Path | None = None, caption_files: bool = False,
                controls: Path | None = None) -> SubsetSpec:
    metadata = kind == "metadata"
    return SubsetSpec(kind, Path(path).expanduser(), repeats, tokens, is_reg, values["caption_extension"],
                      caption_options(values, metadata), values["flip_aug"], values["random_crop"],
                      metadata_filters(values) if metadata else None, field, label,
                      bool(values.get("alpha_mask", False)), masks, bool(values.get("color_aug", False)),
                      metadata_file, caption_files, controls, _sizing(values))


def _sizing(values: Mapping[str, Any]) -> ControlSizing:
    try:
        return sizing_from_values(values)
    except ValueError:  # named by the edit model's checks (a dataset_config's by its loading)
        return ControlSizing(bool(values.get("no_resize_control")))


def specs_from_values(values: Mapping[str, Any]) -> DatasetSpec:
    """The one dataset of a flat config."""
    subsets = []
    in_json = str(values.get("in_json") or "").strip()
    fine_tuning = bool(in_json) or bool(values.get("in_json_from_captions"))
    if fine_tuning:  # train_data_dir holds the images of the metadata file (fine_tune.py)
        subsets.append(subset_spec("metadata_file", Path(str(values["train_data_dir"]).strip() or "."), values,
                                   repeats=values["dataset_repeats"], field="in_json" if in_json else "train_data_dir",
                                   metadata_file=Path(in_json).expanduser() if in_json else None,
                                   caption_files=bool(values.get("in_json_from_captions"))))
    for name, kind, is_reg in (("train_data_dir", "kohya_root", False), ("reg_data_dir", "kohya_root", True),
                               ("metadata_dir", "metadata", False)):
        if str(values[name]).strip() and not (fine_tuning and name == "train_data_dir"):
            repeats = values["dataset_repeats"] if kind == "metadata" else 1
            subsets.append(subset_spec(kind, Path(values[name]), values, repeats=repeats, is_reg=is_reg, field=name,
                                       masks=_mask_folder(values) if name == "train_data_dir" else None,
                                       controls=control_folder(values) if name == "train_data_dir" else None))
    return DatasetSpec(bucket_settings(values), values["train_batch_size"], tuple(subsets),
                       validation_split=values.get("validation_split", 0.0),
                       validation_seed=values.get("validation_seed"))


def control_folder(values: Mapping[str, Any]) -> Path | None:
    """An edit model's control folder: control_directory (musubi-tuner's name), else conditioning_data_dir
    (sd-scripts') when it holds no masks."""
    folder = str(values.get("control_directory") or "").strip() or (
        "" if values.get("masked_loss") else str(values.get("conditioning_data_dir") or "").strip())
    return Path(folder).expanduser() if folder else None


def _mask_folder(values: Mapping[str, Any]) -> Path | None:
    folder = str(values.get("conditioning_data_dir") or "").strip()
    return Path(folder).expanduser() if folder and values.get("masked_loss") else None
