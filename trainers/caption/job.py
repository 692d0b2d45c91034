"""The loop of a caption or mask job, one image at a time into its own file.

The images not done yet go through the model in batches; each result is written (renamed into place, never half a
file) as soon as it is produced and then listed in the job folder's done.txt. A stop request ends the job between
batches and a crash ends it anywhere: either way the finished files are written and the rest untouched, and a job
with `resume = <that folder>` does only the rest. An image that cannot be read (or whose old file cannot be
appended to) is listed and skipped.
"""
from __future__ import annotations

import os
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainers.caption.events import ImageResult, ImagesProgress
from trainers.caption.options import DONE_LIST, JobConfig
from trainers.core import events as ev
from trainers.core.errors import ToolError
from trainers.core.job import PROGRESS_EVERY_S, JobFolder, JobStopped
from trainers.data.kohya_folders import IMAGE_EXTENSIONS

RATE_WINDOW = 8  # batches the images/s rate is measured over


class SkipImage(Exception):
    """Raised by a job's `write` for an image whose result cannot be written: it is listed and skipped."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def find_images(root: Path) -> list[Path]:
    """The images under `root` (its subfolders too), in a stable order; hidden files and folders (temp files, .git)
    are left out."""
    found: list[Path] = []
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        found += [Path(folder) / n for n in sorted(files)
                  if not n.startswith(".") and os.path.splitext(n)[1].lower() in IMAGE_EXTENSIONS]
    return found


def read_done(job_dir: Path) -> set[str]:
    """The images a job folder lists as finished."""
    try:
        return {line for line in (job_dir / DONE_LIST).read_text(encoding="utf-8").splitlines() if line}
    except FileNotFoundError:
        return set()


@dataclass
class Summary:
    total: int = 0
    written: list[str] = field(default_factory=list)
    skipped_existing: int = 0
    skipped_done: int = 0
    unreadable: list[str] = field(default_factory=list)  # "path: why"

    @property
    def skipped(self) -> int:
        return self.skipped_existing + self.skipped_done


class ImageJob(JobFolder):
    """A job whose progress counts images, with a wall-clock rate over the last batches."""

    cfg: JobConfig

    def __init__(self, cfg: JobConfig, folder: Path | None, events: ev.EventWriter | None = None) -> None:
        super().__init__(cfg, folder, events)
        self._recent: deque[tuple[float, int]] = deque(maxlen=RATE_WINDOW + 1)

    def count(self, summary: Summary, done: int, todo: int, final: bool = False) -> None:
        now = time.monotonic()
        self._recent.append((now, done))
        if not final and now - self._last < PROGRESS_EVERY_S:
            return
        self._last = now
        (t0, d0), (t1, d1) = self._recent[0], self._recent[-1]
        rate = (d1 - d0) / (t1 - t0) if t1 > t0 and d1 > d0 else None
        eta = round((todo - done) / rate, 1) if rate and done < todo else None
        self.events.emit(ImagesProgress(stage=self.cfg.verb, done=done, total=todo, eta_s=eta,
                                        images_per_s=round(rate, 3) if rate else None,
                                        skipped=summary.skipped, unreadable=len(summary.unreadable)))


def _batches(items: list[Any], size: int) -> Iterator[list[Any]]:
    for start in range(0, len(items), size):
        yield items[start:start + size]


def run_images(job: ImageJob, target_of: Callable[[Path], Path], process: Callable[[list[Any]], list[Any]],
               write: Callable[[Path, Path, Any, Any], ImageResult], images: list[Path] | None = None) -> Summary:
    """Run `process` (PIL images -> results) over `images` (default: those of the folder `job.cfg.images`) whose
    target (`target_of(image)`) is not done yet; `write(image, target, result, pil image)` writes one result and
    says what it wrote."""
    from trainers.data.images import ImageLoadError, load_image_rgb

    cfg, summary = job.cfg, Summary()
    root = Path(cfg.images).expanduser()
    images = find_images(root) if images is None else images
    if not images:
        raise ToolError("images", f"{root} holds no images ({', '.join(sorted(IMAGE_EXTENSIONS))}), in it or its "
                                  "subfolders")
    summary.total = len(images)
    done_before = read_done(Path(cfg.resume).expanduser()) if cfg.resume.strip() else set()
    todo = []
    for image in images:
        if str(image) in done_before:
            summary.skipped_done += 1
        elif cfg.existing == "skip" and target_of(image).exists():
            summary.skipped_existing += 1
        else:
            todo.append(image)
    done_list = _open_done_list(job, done_before)
    job.count(summary, 0, len(todo), final=True)
    done = 0
    try:
        for batch in _batches(todo, cfg.batch_size):
            if job.stop_requested():
                raise JobStopped(f"stopped after {done} of {len(todo)} images; those are written and the rest are "
                                  f"untouched (a job with resume = {job.folder} does the rest)")
            loaded: list[tuple[Path, Any]] = []
            for image in batch:
                try:
                    loaded.append((image, load_image_rgb(image)))
                except ImageLoadError as err:
                    summary.unreadable.append(f"{image}: {err.reason}")
                    job.warn(f"skipped {image}: it cannot be read ({err.reason})")
            results = process([pil for _, pil in loaded]) if loaded else []
            for (image, pil), result in zip(loaded, results, strict=True):
                try:
                    job.events.emit(write(image, target_of(image), result, pil))
                except SkipImage as skipped:
                    summary.unreadable.append(f"{image}: {skipped.reason}")
                    job.warn(f"skipped {image}: {skipped.reason}")
                    continue
                summary.written.append(str(image))
                if done_list is not None:
                    done_list.write(f"{image}\n")
                    done_list.flush()
            done += len(batch)
            job.count(summary, done, len(todo), final=done == len(todo))
    finally:
        if done_list is not None:
            done_list.close()
    return summary


def _open_done_list(job: ImageJob, carried: set[str]) -> Any:
    """The job folder's done.txt, opened to append, holding what a resumed job had done (so a resume of a resume
    still skips it)."""
    if job.folder is None:
        return None
    job.folder.mkdir(parents=True, exist_ok=True)
    done_list = open(job.folder / DONE_LIST, "a", encoding="utf-8")
    done_list.writelines(f"{line}\n" for line in sorted(carried))
    done_list.flush()
    return done_list


def summary_report(job: ImageJob, summary: Summary, what: str, data: dict[str, Any]) -> str:
    """The job's report: how many images got their `what`, which were skipped and which could not be read; returns
    its first line."""
    lines = [f"- {len(summary.written)} of {summary.total} images got their {what}",
             f"- {summary.skipped_existing} skipped: they already had one (existing = {job.cfg.existing})"]
    if summary.skipped_done:
        lines.append(f"- {summary.skipped_done} skipped: done by the resumed job")
    if summary.unreadable:
        lines.append(f"- {len(summary.unreadable)} could not be read and were skipped:")
        lines += [f"  - `{line}`" for line in summary.unreadable]
    data = {"total": summary.total, "written": len(summary.written), "skipped_existing": summary.skipped_existing,
            "skipped_done": summary.skipped_done, "unreadable": summary.unreadable, **data}
    job.report(f"{job.cfg.verb.capitalize()} of {job.cfg.images}", "\n".join(lines), data)
    return f"{len(summary.written)} of {summary.total} images got their {what}"
