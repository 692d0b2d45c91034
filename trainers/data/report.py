"""The preflight report of a dataset: what a run would train on. Torch-free; filled from the catalog by
trainers/preflight/report.py (`preflight`, with every check of the config) and by the trainer when it starts.

    report.ok, report.errors, report.warnings, report.steps_per_epoch, report.total_steps
    print(report.text())          # or report.to_dict() for JSON

Images per folder, captions found and missing, buckets with their image counts, buckets smaller
than batch x processes x accumulation, duplicate basenames, skipped files with the reason,
metadata filter counts, and the steps an epoch takes on `num_processes` processes.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any

from trainers.core.options import ConfigError, ConfigIssue, TrainConfig
from trainers.core.plan import StepPlan, plan_steps
from trainers.data.catalog import Catalog

MAX_LISTED = 20  # skipped files and duplicates shown in the text (all are in the fields)


@dataclass
class SubsetSummary:
    name: str
    folder: str
    dataset: int  # 1-based
    kind: str  # "train", "reg" or "metadata"
    repeats: int
    images: int
    captions_found: int
    captions_missing: int
    tokens: str
    samples_per_epoch: int
    skipped: int
    metadata_files: int = 0
    metadata_dropped: dict[str, int] = field(default_factory=dict)
    validation: int = 0  # images held out for the validation loss (not among `images`)


@dataclass
class BucketSummary:
    dataset: int  # 1-based
    width: int
    height: int
    images: int
    samples_per_epoch: int
    batch_size: int
    too_small: bool  # fewer images than batch x processes x accumulation


@dataclass
class PreflightReport:
    num_processes: int
    errors: list[ConfigIssue] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    subsets: list[SubsetSummary] = field(default_factory=list)
    buckets: list[BucketSummary] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (path, reason)
    duplicates: list[tuple[str, list[str]]] = field(default_factory=list)
    train_samples: int = 0
    reg_samples: int = 0
    validation_images: int = 0
    plan: StepPlan | None = None
    memory: str = ""  # what the weights take in GPU memory (trainers/core/weights_memory.py)

    @property
    def ok(self) -> bool:
        return not self.errors

    @property
    def steps_per_epoch(self) -> int | None:
        return self.plan.steps_per_epoch if self.plan else None

    @property
    def total_steps(self) -> int | None:
        return self.plan.total_steps if self.plan else None

    def to_dict(self, max_listed: int | None = None) -> dict[str, Any]:
        """JSON-ready; `max_listed` caps the skipped and duplicate lists (their full counts are kept)."""
        out = asdict(self)
        out["errors"] = [{"field": i.field, "message": i.message, "group": i.group} for i in self.errors]
        out.update(ok=self.ok, steps_per_epoch=self.steps_per_epoch, total_steps=self.total_steps,
                   num_skipped=len(self.skipped), num_duplicates=len(self.duplicates))
        if max_listed is not None:
            out["skipped"], out["duplicates"] = out["skipped"][:max_listed], out["duplicates"][:max_listed]
        return out

    def text(self, with_memory: bool = True) -> str:
        lines = [f"Preflight for {self.num_processes} process{'es' if self.num_processes != 1 else ''}:"]
        if self.subsets:
            lines.append("Folders:")
            lines += [f"  {_subset_line(s)}" for s in self.subsets]
        if self.buckets:
            lines.append("Buckets:")
            for b in self.buckets:
                flag = "  <- fewer images than one global batch" if b.too_small else ""
                lines.append(f"  dataset {b.dataset}, {b.width}x{b.height}: {b.images} image(s), "
                             f"{b.samples_per_epoch} sample(s) an epoch (batch {b.batch_size}){flag}")
        if self.skipped:
            lines.append(f"Skipped files ({len(self.skipped)}):")
            lines += [f"  {path}: {reason}" for path, reason in self.skipped[:MAX_LISTED]]
            if len(self.skipped) > MAX_LISTED:
                lines.append(f"  ... and {len(self.skipped) - MAX_LISTED} more")
        if self.duplicates:
            lines.append(f"Duplicate basenames ({len(self.duplicates)}):")
            lines += [f"  {name}: {', '.join(paths)}" for name, paths in self.duplicates[:MAX_LISTED]]
        if self.plan:
            p = self.plan
            reg = f" + {self.reg_samples} regularization" if self.reg_samples else ""
            lines.append(f"Steps: {self.train_samples} training{reg} samples an epoch; {p.describe()} -> "
                         f"{p.steps_per_epoch} steps an epoch, {p.epochs} epoch(s) = {p.total_steps} steps")
        if self.validation_images:
            lines.append(f"Validation: {self.validation_images} held-out image(s) (validation_split), never trained "
                         "on; their loss is computed at 4 fixed timesteps")
        if self.memory and with_memory:
            lines.append(self.memory)
        lines += [f"warning: {w}" for w in self.warnings]
        lines += [f"error: {issue}" for issue in self.errors]
        lines.append("OK: ready to train." if self.ok else f"{len(self.errors)} problem(s) to fix before training.")
        return "\n".join(lines)


def _subset_line(s: SubsetSummary) -> str:
    images = f"{s.images} training + {s.validation} validation images" if s.validation else f"{s.images} image(s)"
    if s.kind == "metadata":
        head = f"[metadata] {s.name} (dataset {s.dataset}): {s.metadata_files} JSON file(s), {images} kept"
    else:
        head = (f"[{s.kind}] {s.name} (dataset {s.dataset}): {images}, {s.captions_found} caption(s) "
                f"found, {s.captions_missing} missing")
        if s.captions_missing:
            head += f' (using "{s.tokens}")' if s.tokens else " (empty caption)"
    head += f", x{s.repeats} repeats = {s.samples_per_epoch} sample(s) an epoch"
    if s.kind == "reg":
        head += " after balancing"
    head += f"; {s.skipped} file(s) skipped" if s.skipped else ""
    return "\n    ".join([head] + [f"dropped: {n} x {reason}" for reason, n in s.metadata_dropped.items()])


def catalog_report(cfg: TrainConfig, catalog: Catalog, num_processes: int, warnings: list[str]) -> PreflightReport:
    """The report of a dataset already read (the trainer prints it when it starts)."""
    report = PreflightReport(num_processes, warnings=list(warnings))
    fill_report(report, catalog, cfg)
    return report


def fill_report(report: PreflightReport, catalog: Catalog, cfg: TrainConfig) -> None:
    """The catalog's numbers into `report`."""
    accumulation = cfg.gradient_accumulation_steps
    split_ok = True
    try:
        per_device = catalog.per_device_batches(report.num_processes, cfg.keep_global_batch)
    except ConfigError as err:  # a global batch that does not split over the processes
        known = {str(issue) for issue in report.errors}
        report.errors += [issue for issue in err.issues if str(issue) not in known]
        per_device, split_ok = [max(1, spec.batch_size // report.num_processes) for spec in catalog.datasets], False
    for s in catalog.subsets:
        found = sum(1 for i in s.images if catalog.images[i].caption_from_file)
        kind = "metadata" if s.spec.kind == "metadata" else "reg" if s.is_reg else "train"
        report.subsets.append(SubsetSummary(
            s.name, str(s.folder), s.dataset + 1, kind, s.repeats, len(s.images), found, len(s.images) - found,
            s.tokens, s.samples, len(s.skipped), s.metadata_files, dict(s.metadata_dropped), s.held_out))
    for (d, width, height), (images, samples) in catalog.bucket_counts().items():
        batch = per_device[d]
        small = images < batch * report.num_processes * accumulation
        report.buckets.append(BucketSummary(d + 1, width, height, images, samples, batch, small))
        if small:
            report.warnings.append(
                f"bucket {width}x{height} (dataset {d + 1}) holds {images} image(s), fewer than batch {batch} x "
                f"{report.num_processes} process(es) x {accumulation} accumulation: its batches repeat images or "
                "are partial; add images of that shape or use fewer buckets")
    report.skipped = [(str(s.path), s.reason) for s in catalog.skipped]
    if report.skipped:
        reasons = Counter(reason.split(" (")[0] for _, reason in report.skipped)
        report.warnings.append(f"{len(report.skipped)} file(s) skipped: "
                               + ", ".join(f"{n} {reason}" for reason, n in reasons.most_common()))
    report.duplicates = [(name, [str(p) for p in paths]) for name, paths in catalog.duplicate_basenames()]
    if report.duplicates:
        report.warnings.append(f"{len(report.duplicates)} duplicate basename(s): images that share a caption file "
                               "or the same file name in several folders (listed under 'Duplicate basenames')")
    report.train_samples, report.reg_samples = catalog.num_train_samples, catalog.num_reg_samples
    report.validation_images = catalog.num_validation_images
    cadence = [n for n in ("validate_every_n_steps", "validate_every_n_epochs") if cfg.values.get(n)]
    if cadence and not report.validation_images:
        report.warnings.append(f"{cadence[0]} is set, but no image is held out for validation: set validation_split "
                               "(e.g. 0.1) for a validation loss")
    if (cfg.max_train_epochs or cfg.max_train_steps) and split_ok:
        sampler = catalog.batch_sampler(report.num_processes, cfg.seed, keep_global_batch=cfg.keep_global_batch)
        report.plan = plan_steps(len(catalog.samples), per_device[0] if per_device else cfg.train_batch_size,
                                 report.num_processes, accumulation,
                                 cfg.max_train_epochs, cfg.max_train_steps, sampler.groups_per_epoch(),
                                 cfg.keep_global_batch)
