"""A video family's run reads its clips (torch-free; the video layer of the model families): which runs do (their
dataset_config is musubi-tuner's video dataset TOML, trainers/data/video_toml.py), and the video catalog as a run
asks a catalog its counts (RunClips: what the preflight report, the session's step plan and the LoRA file's metadata
read of trainers/data/catalog.py's Catalog). The data itself flows through trainers/data/pipeline.py's
build_video_pipeline.
"""
from __future__ import annotations

import tomllib
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainers.core.options import ConfigError, ConfigIssue
from trainers.data.buckets import BucketBatchSampler
from trainers.data.catalog import SkippedFile
from trainers.data.video_catalog import VideoCatalog, build_video_catalog
from trainers.data.video_toml import FIELD, is_musubi_dataset_config, is_video_dataset_config, load_video_dataset_config
from trainers.models.rules import ModelLoadError, folder_rules, rules_of


def is_video_run(values: Mapping[str, Any]) -> bool:
    """Whether the run's dataset_config is a musubi-tuner video dataset config, or a musubi-tuner image dataset config
    of a video family's run (its images train as 1-frame clips); one that cannot be read is not: the image reader
    names its problem."""
    path = Path(str(values.get(FIELD) or "")).expanduser()
    if not str(values.get(FIELD) or "").strip() or not path.is_file():
        return False
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError):
        return False
    if is_video_dataset_config(raw):
        return True
    try:
        return is_musubi_dataset_config(raw) and bool(getattr(run_family(values), "is_video", False))
    except KeyError:  # an unknown model_family: its check names it
        return False


def run_family(values: Mapping[str, Any]) -> Any:
    """The run's family rules (torch-free): model_family, or what its diffusers folder is; None when not known."""
    name = str(values.get("model_family") or "auto")
    if name != "auto":
        return rules_of(name)
    folder = Path(str(values.get("pretrained_model_name_or_path") or "")).expanduser()
    try:
        return folder_rules(folder) if folder.is_dir() else None
    except ModelLoadError:
        return None


def video_run_catalog(values: Mapping[str, Any], warnings: list[str]) -> "RunClips":
    """The clips of a video run, at its family's frame rule and rate; ConfigError when its family trains on images."""
    family = run_family(values)
    if family is not None and not getattr(family, "is_video", False):
        raise ConfigError([ConfigIssue(FIELD, f"{Path(str(values[FIELD])).name} is a musubi-tuner video dataset "
                                       f"config: clips train only with a video family (docs/video.md), and "
                                       f"{family.title} trains on images: write an sd-scripts dataset config, or "
                                       "set train_data_dir to an image folder", "dataset")])
    specs = load_video_dataset_config(Path(str(values[FIELD])), warnings)
    rule, rate = (family.frame_rule, family.frame_rate) if family is not None else (4, None)
    step = family.bucket_step if family is not None else 16
    catalog = build_video_catalog(specs, rule, rate, bucket_steps=step, warnings=warnings)
    warnings.extend(catalog.warnings)
    return RunClips(catalog)


@dataclass
class RunClips:
    """A VideoCatalog answering what a run asks a Catalog: clips have no kohya subsets, regularization, held-out
    images or tags; buckets count windows per (dataset, width, height) over their frame counts."""

    video: VideoCatalog
    validation: None = None
    num_validation_images: int = 0
    num_reg_samples: int = 0

    @property
    def subsets(self) -> list[Any]:
        return []

    @property
    def images(self) -> list[Any]:
        return []

    @property
    def datasets(self) -> list[Any]:
        return self.video.datasets

    @property
    def samples(self) -> list[int]:
        return self.video.samples

    @property
    def skipped(self) -> list[SkippedFile]:
        return self.video.skipped

    @property
    def num_train_samples(self) -> int:
        return len(self.video.samples)

    def per_device_batches(self, num_processes: int, keep_global_batch: bool) -> list[int]:
        """Each dataset's batch_size, per process as musubi-tuner's is."""
        return [spec.batch_size for spec in self.video.datasets]

    def batch_sampler(self, num_processes: int, seed: int, keep_global_batch: bool = False) -> BucketBatchSampler:
        return self.video.batch_sampler(num_processes, seed)

    def bucket_counts(self) -> dict[tuple[int, int, int], tuple[int, int]]:
        windows: Counter[tuple[int, int, int]] = Counter()
        samples: Counter[tuple[int, int, int]] = Counter()
        for (dataset, _, width, height), (n, s) in self.video.bucket_counts().items():
            windows[(dataset, width, height)] += n
            samples[(dataset, width, height)] += s
        return {key: (windows[key], samples[key]) for key in sorted(windows)}

    def duplicate_basenames(self) -> list[tuple[str, list[Path]]]:
        return []

    def dataset_dirs(self, reg: bool = False) -> dict[str, dict[str, int]]:
        if reg:
            return {}
        clips = Counter(spec.label for clip in self.video.clips for spec in [self.video.datasets[clip.dataset]])
        return {spec.label: {"n_repeats": spec.num_repeats, "img_count": clips[spec.label]}
                for spec in self.video.datasets}

    def tag_frequency(self) -> dict[str, dict[str, int]]:
        return {}

    def report_lines(self) -> list[str]:
        return self.video.report_lines()
