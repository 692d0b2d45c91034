"""Everything a run will train on, found before any model loads: images, captions, sizes, buckets, samples.

``build_catalog(values)`` reads the folders (kohya, image_dir, metadata JSON), checks every image
cheaply (header and size), assigns buckets, holds out the validation images (holdout.py), balances
regularization images as sd-scripts does, and lists the files it skipped with the reason. The preflight
report and the trainer share it. Torch-free.
"""
from __future__ import annotations

import os
from collections import Counter
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainers.data import downscale
from trainers.data.buckets import BucketBatchSampler, BucketChooser
from trainers.data.captions import CaptionOptions
from trainers.data.dataset_toml import dataset_specs
from trainers.data.downscale import cover_size
from trainers.data.holdout import split_images, without_augmentation
from trainers.data.kohya_folders import (
    DatasetLayoutError,
    ImageItem,
    match_masks,
    scan_image_folder,
    scan_kohya_folders,
)
from trainers.data.metadata_file import read_metadata_file
from trainers.data.metadata_json import scan_metadata_dir
from trainers.data.probe import ImageSkipped, probe_image
from trainers.data.specs import DatasetSpec, SubsetSpec

BucketKey = tuple[int, int, int]  # (dataset, width, height)


@dataclass(frozen=True)
class SkippedFile:
    path: Path
    reason: str


@dataclass
class CatalogImage:
    path: Path
    caption: str
    caption_from_file: bool
    size: tuple[int, int]  # (width, height), EXIF orientation applied
    bucket: tuple[int, int]  # (width, height) it trains at
    subset: int
    mask: Path | None = None  # masked_loss: its mask image


@dataclass
class CatalogSubset:
    spec: SubsetSpec
    dataset: int
    name: str
    folder: Path
    repeats: int
    tokens: str
    images: list[int] = field(default_factory=list)
    skipped: list[SkippedFile] = field(default_factory=list)
    metadata_files: int = 0
    metadata_dropped: Counter = field(default_factory=Counter)
    samples: int = 0  # samples an epoch (images x repeats; for reg images after balancing)
    held_out: int = 0  # images held out for validation (validation_split), not among `images`

    @property
    def is_reg(self) -> bool:
        return self.spec.is_reg

    @property
    def captions(self) -> CaptionOptions:
        return self.spec.captions


@dataclass
class Catalog:
    datasets: list[DatasetSpec]
    subsets: list[CatalogSubset]
    images: list[CatalogImage]
    samples: list[int]  # image index of each sample of an epoch
    warnings: list[str] = field(default_factory=list)
    validation: Catalog | None = None  # the images held out (validation_split): each once, never trained on

    # --- what the trainer needs
    def bucket_of(self, sample: int) -> BucketKey:
        image = self.images[self.samples[sample]]
        return (self.subsets[image.subset].dataset, *image.bucket)

    def batch_sampler(self, num_processes: int, seed: int, shuffle: bool = True,
                      keep_global_batch: bool = False) -> BucketBatchSampler:
        """Bucket batches for `num_processes`; with `keep_global_batch` each dataset's batch size is the global one."""
        buckets = [self.bucket_of(i) for i in range(len(self.samples))]
        per_device = self.per_device_batches(num_processes, keep_global_batch)
        sizes = {b: per_device[b[0]] for b in set(buckets)}
        return BucketBatchSampler(buckets, sizes, num_processes, seed, shuffle)

    def per_device_batches(self, num_processes: int, keep_global_batch: bool) -> list[int]:
        """Each dataset's per-process batch; a global batch that does not split evenly is a ConfigError."""
        from trainers.core.options import ConfigError, ConfigIssue
        from trainers.core.plan import BatchSplitError, per_device_batch

        out, issues = [], []
        for spec in self.datasets:
            try:
                out.append(per_device_batch(spec.batch_size, num_processes, keep_global_batch))
            except BatchSplitError as err:
                field = "dataset_config" if spec.label else "train_batch_size"
                where = f"batch_size of {spec.label} " if spec.label else ""
                issues.append(ConfigIssue(field, f"{where}{err}", "optimizer" if not spec.label else "dataset"))
                out.append(1)
        if issues:
            raise ConfigError(issues)
        return out

    def subset_of(self, sample: int) -> CatalogSubset:
        return self.subsets[self.images[self.samples[sample]].subset]

    # --- what users read
    @property
    def skipped(self) -> list[SkippedFile]:
        return [s for subset in self.subsets for s in subset.skipped]

    @property
    def num_train_samples(self) -> int:
        return sum(s.samples for s in self.subsets if not s.is_reg)

    @property
    def num_reg_samples(self) -> int:
        return sum(s.samples for s in self.subsets if s.is_reg)

    @property
    def num_validation_images(self) -> int:
        return len(self.validation.images) if self.validation else 0

    def bucket_counts(self) -> dict[BucketKey, tuple[int, int]]:
        """(images, samples an epoch) per bucket."""
        images = Counter((self.subsets[i.subset].dataset, *i.bucket) for i in self.images)
        samples = Counter(self.bucket_of(k) for k in range(len(self.samples)))
        return {key: (images[key], samples[key]) for key in sorted(images)}

    def duplicate_basenames(self) -> list[tuple[str, list[Path]]]:
        """Images in one folder whose names differ only in extension (they share a caption file), and
        files of the same name and size in several folders (the same picture copied twice; numbered
        files like 001.png in every folder are normal and not listed)."""
        by_stem: dict[tuple[Path, str], set[Path]] = {}
        by_name: dict[tuple[str, int], set[Path]] = {}
        for image in self.images:
            by_stem.setdefault((image.path.parent, image.path.stem), set()).add(image.path)
            try:
                by_name.setdefault((image.path.name, image.path.stat().st_size), set()).add(image.path)
            except OSError:
                pass
        found = [(f"{stem}.*", sorted(paths)) for (_, stem), paths in by_stem.items() if len(paths) > 1]
        found += [(name, sorted(paths)) for (name, _), paths in by_name.items() if len({p.parent for p in paths}) > 1]
        return sorted(found, key=lambda item: item[0])

    def dataset_dirs(self, reg: bool = False) -> dict[str, dict[str, int]]:
        """kohya's ss_dataset_dirs / ss_reg_dataset_dirs."""
        return {s.name: {"n_repeats": s.repeats, "img_count": len(s.images)} for s in self.subsets if s.is_reg == reg}

    def tag_frequency(self) -> dict[str, dict[str, int]]:
        """kohya's ss_tag_frequency: tags (lower-cased) counted once per image, per folder."""
        result: dict[str, dict[str, int]] = {}
        for subset in self.subsets:
            counts: Counter[str] = Counter()
            for index in subset.images:
                split_on = subset.captions.split_on
                caption = self.images[index].caption.replace("\n", split_on)  # wildcard captions: one line each
                counts.update({t.strip().lower() for t in caption.split(split_on) if t.strip()})
            result[subset.name] = dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))
        return result

    def without(self, bad: dict[int, str]) -> Catalog:
        """The catalog less the images in `bad` (index -> reason), e.g. those that failed to decode."""
        subsets = [CatalogSubset(s.spec, s.dataset, s.name, s.folder, s.repeats, s.tokens, [], list(s.skipped),
                                 s.metadata_files, Counter(s.metadata_dropped), held_out=s.held_out)
                   for s in self.subsets]
        items: list[list[CatalogImage]] = [[] for _ in subsets]
        for index, image in enumerate(self.images):
            if index in bad:
                subsets[image.subset].skipped.append(SkippedFile(image.path, bad[index]))
            else:
                items[image.subset].append(image)
        catalog = _assemble(self.datasets, subsets, items, list(self.warnings))
        catalog.validation = self.validation
        return catalog


def build_catalog(values: Mapping[str, Any], warnings: list[str] | None = None,
                  controls: int | None = None) -> Catalog:
    """Read the run's datasets. Raises DatasetLayoutError / ConfigError when nothing can be trained. `controls`: how
    many control images the run's model takes (trainers/models/edit_rules.py `takes_controls`; None: not known)."""
    warnings = [] if warnings is None else warnings
    specs = dataset_specs(values, warnings, controls)
    subsets: list[CatalogSubset] = []
    found: list[list[tuple[ImageItem, SubsetSpec]]] = []
    for d, spec in enumerate(specs):
        for sub in spec.subsets:
            for subset, items in _read_subset(sub, d, warnings):
                subsets.append(subset)
                found.append(items)
    sizes = _probe_all([item.path for items in found for item in items])
    choosers = [BucketChooser(spec.buckets) for spec in specs]
    images: list[list[CatalogImage]] = []
    for subset, items in zip(subsets, found):
        kept = []
        for item in items:
            size = sizes[item.path]
            if isinstance(size, str):
                subset.skipped.append(SkippedFile(item.path, size))
                continue
            bucket = choosers[subset.dataset].choose(*size)
            if bucket is None:
                subset.skipped.append(SkippedFile(item.path, f"too small ({size[0]}x{size[1]}) for a bucket with "
                                                  "bucket_no_upscale"))
                continue
            kept.append(CatalogImage(item.path, item.caption, item.caption_from_file, size, bucket, 0))
        images.append(kept)
    _attach_masks(subsets, images, warnings)
    held_out = _hold_out(specs, subsets, images, values.get("seed", 0))
    catalog = _assemble(specs, subsets, images, warnings)
    catalog.validation = _validation_catalog(specs, subsets, held_out)
    if not catalog.samples:
        raise DatasetLayoutError(_nothing_left(catalog), field=subsets[0].spec.field if subsets else "train_data_dir")
    return catalog


def _read_subset(spec: SubsetSpec, dataset: int, warnings: list[str]):
    """Yield (subset, image items) for one spec; a kohya root yields one per <repeats>_<tokens> folder."""
    if spec.kind == "kohya_root":
        scan = scan_kohya_folders(spec.path, spec.caption_extension, field=spec.field, all_lines=spec.captions.wildcard,
                                  strict=spec.captions.strict)
        warnings.extend(scan.warnings)
        for sub in scan.subsets:
            yield CatalogSubset(spec, dataset, sub.folder.name, sub.folder, sub.repeats, sub.tokens), sub.images
    elif spec.kind == "folder":
        sub, folder_warnings = scan_image_folder(spec.path, spec.repeats, spec.tokens, spec.caption_extension,
                                                 field=spec.field, all_lines=spec.captions.wildcard,
                                                 strict=spec.captions.strict)
        warnings.extend(f"{spec.label}: {w}" for w in folder_warnings)
        yield CatalogSubset(spec, dataset, spec.path.name, spec.path, spec.repeats, spec.tokens), sub.images
    elif spec.kind == "metadata_file":
        folder = spec.path if str(spec.path) not in ("", ".") else None
        items, file_warnings = read_metadata_file(spec.metadata_file, folder, spec.captions.split_on, spec.field,
                                                  spec.captions.wildcard,
                                                  spec.caption_extension if spec.caption_files else None,
                                                  spec.captions.strict)
        warnings.extend(f"{spec.label}: {w}" if spec.label else w for w in file_warnings)
        name = spec.metadata_file.stem if spec.metadata_file else spec.path.name
        yield CatalogSubset(spec, dataset, name, spec.path, spec.repeats, ""), items
    else:
        scan = scan_metadata_dir(spec.path, spec.metadata)
        subset = CatalogSubset(spec, dataset, spec.path.name, spec.path, spec.repeats, "", metadata_files=scan.files,
                               metadata_dropped=Counter(scan.dropped))
        separator = spec.metadata.separator
        yield subset, [ImageItem(r.image, separator.join(r.tags), True) for r in scan.records]


def _hold_out(specs: list[DatasetSpec], subsets: list[CatalogSubset], images: list[list[CatalogImage]],
              seed: int) -> list[list[CatalogImage]]:
    """Take each training subset's validation images out of `images` (in place) and return them, per subset."""
    held_out: list[list[CatalogImage]] = []
    emptied = []
    for subset, kept in zip(subsets, images):
        spec = specs[subset.dataset]
        if subset.is_reg or not spec.validation_split:
            held_out.append([])
            continue
        train, held = split_images(kept, spec.validation_split,
                                   seed if spec.validation_seed is None else spec.validation_seed)
        if kept and not train:
            emptied.append(f"{subset.name} ({len(kept)} image(s))")
        kept[:] = train
        subset.held_out = len(held)
        held_out.append(held)
    if emptied:
        from trainers.core.options import ConfigError, ConfigIssue

        labelled = subsets[0].spec.label
        raise ConfigError([ConfigIssue("dataset_config" if labelled else "validation_split",
                                       f"validation_split holds out every image of {', '.join(emptied)}, leaving "
                                       "nothing to train on there: lower validation_split or add images",
                                       "dataset")])
    return held_out


def _validation_catalog(specs: list[DatasetSpec], subsets: list[CatalogSubset],
                        held_out: list[list[CatalogImage]]) -> Catalog | None:
    """The held-out images as a catalog of their own: each image once, without augmentation."""
    pairs = [(s, held) for s, held in zip(subsets, held_out) if held]
    if not pairs:
        return None
    own = [CatalogSubset(without_augmentation(s.spec), s.dataset, s.name, s.folder, 1, s.tokens) for s, _ in pairs]
    return _assemble(specs, own, [held for _, held in pairs], [])


def mask_folder(subset: CatalogSubset) -> Path | None:
    """Where a subset's mask images are (masked_loss): its conditioning folder, for a kohya root the
    subfolder of the same name in it."""
    masks = subset.spec.masks
    if masks is None:
        return None
    return masks / subset.folder.name if subset.spec.kind == "kohya_root" else masks


def _attach_masks(subsets: list[CatalogSubset], images: list[list[CatalogImage]], warnings: list[str]) -> None:
    """Give each image of a subset with masks its mask file; a missing or unusable mask is an error."""
    problems: list[str] = []
    field = "conditioning_data_dir"
    for subset, kept in zip(subsets, images):
        folder = mask_folder(subset)
        if folder is None or not kept:
            continue
        field = "dataset_config" if subset.spec.label else field
        found, extra = match_masks(folder, [image.path for image in kept])
        if extra:
            listed = ", ".join(extra[:5]) + (", ..." if len(extra) > 5 else "")
            warnings.append(f"{folder}: {len(extra)} mask image(s) match no training image and are not used: {listed}")
        sizes = _probe_all(list(found.values()))
        for image in kept:
            mask = found.get(image.path)
            size = sizes.get(mask) if mask is not None else None
            if mask is None:
                problems.append(f"{image.path}: no mask image {folder / image.path.stem}.* (png, jpg, webp, ...)")
            elif isinstance(size, str):
                problems.append(f"{mask}: {size}")
            elif not _same_shape(size, image.size):
                problems.append(f"{mask} is {size[0]}x{size[1]} but its image is {image.size[0]}x{image.size[1]}: "
                                "a mask must have its image's size (or at least its aspect ratio)")
            else:
                image.mask = mask
    if problems:
        more = f"\n  ... and {len(problems) - 20} more" if len(problems) > 20 else ""
        raise DatasetLayoutError("masked_loss: mask images are missing or unusable:\n  " + "\n  ".join(problems[:20])
                                 + more + "\nFix: give every training image a mask of the same name and size in its "
                                 "conditioning folder (white = train, black = ignore), or turn masked_loss off.",
                                 field=field)


def _same_shape(mask: tuple[int, int], image: tuple[int, int]) -> bool:
    """Equal sizes, or the same aspect ratio to within a pixel (such a mask is resized to its image)."""
    (mw, mh), (w, h) = mask, image
    return abs(mw * h - mh * w) <= max(w, h)


def _probe_all(paths: list[Path]) -> dict[Path, tuple[int, int] | str]:
    """Each image's size, or the reason it is skipped; headers are read in parallel (network drives)."""
    def one(path: Path) -> tuple[int, int] | str:
        try:
            return probe_image(path)
        except ImageSkipped as err:
            return err.reason

    unique = list(dict.fromkeys(paths))
    if len(unique) < 64:
        return {p: one(p) for p in unique}
    with ThreadPoolExecutor(max_workers=min(16, (os.cpu_count() or 2) * 2)) as pool:
        return dict(zip(unique, pool.map(one, unique)))


def _assemble(specs: list[DatasetSpec], subsets: list[CatalogSubset], found: list[list[CatalogImage]],
              warnings: list[str]) -> Catalog:
    """Number the images, then lay out an epoch's samples: repeats, and reg images balanced per dataset."""
    images: list[CatalogImage] = []
    for s, (subset, items) in enumerate(zip(subsets, found)):
        for image in items:
            image.subset = s
            subset.images.append(len(images))
            images.append(image)
    samples: list[int] = []
    for d in range(len(specs)):
        train = [s for s in subsets if s.dataset == d and not s.is_reg]
        for subset in train:
            subset.samples = len(subset.images) * subset.repeats
            samples += [i for i in subset.images for _ in range(subset.repeats)]
        reg = [s for s in subsets if s.dataset == d and s.is_reg]
        counts = _balance_reg([(i, s.repeats) for s in reg for i in s.images], sum(s.samples for s in train))
        for subset in reg:
            subset.samples = sum(counts.get(i, 0) for i in subset.images)
            samples += [i for i in subset.images for _ in range(counts.get(i, 0))]
        if reg and not train:
            warnings.append(f"dataset {d + 1} has regularization images but no training images: they are not used")
    _note_oversized(images, warnings)
    return Catalog(specs, subsets, images, samples, warnings)


def _note_oversized(images: list[CatalogImage], warnings: list[str]) -> None:
    """Say which images are decoded in full only once (downscale.py), and where their copies go."""
    big = [i for i in images if i.bucket and downscale.wants_copy(
        i.size, max(cover_size(*i.size, *i.bucket)), "JPEG" if i.path.suffix.lower() in (".jpg", ".jpeg") else None)]
    if big:
        largest = max(big, key=lambda i: i.size[0] * i.size[1])
        warnings.append(f"{len(big)} image(s) are over {downscale.OVERSIZE}x the size their bucket needs (largest: "
                        f"{largest.path.name}, {largest.size[0]}x{largest.size[1]}): each is decoded in full once and "
                        f"a downscaled copy kept in {downscale.cache_dir()} for the next draws")


def _balance_reg(reg: list[tuple[int, int]], num_train: int) -> dict[int, int]:
    """sd-scripts: reg images (with their repeats) are used, then repeated once more each in turn,
    until there are as many reg samples as training samples; surplus reg images are left out."""
    counts: dict[int, int] = {}
    n, first = 0, True
    while reg and n < num_train:
        for image, repeats in reg:
            add = repeats if first else 1
            counts[image] = counts.get(image, 0) + add
            n += add
            if n >= num_train:
                break
        first = False
    return counts


def _nothing_left(catalog: Catalog) -> str:
    reasons = Counter(s.reason for s in catalog.skipped)
    if any(s.images for s in catalog.subsets):
        return ("no training images: only regularization images are left, and they only balance training "
                "images. Fix: add training images (train_data_dir, or subsets without is_reg).")
    lines = ["no usable images: every image was skipped"]
    lines += [f"  {count} x {reason}" for reason, count in reasons.most_common()]
    for subset in catalog.subsets:
        for reason, count in subset.metadata_dropped.most_common():
            lines.append(f"  {subset.name}: {count} JSON file(s) dropped: {reason}")
    lines.append("Fix: check the files listed by `python -m trainers preflight --config <your config>`.")
    return "\n".join(lines)
