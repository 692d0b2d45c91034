"""What caption and mask jobs add to every job's events (trainers/core/job.py): progress counted in images, with a
rate, and the newest result (a caption or a mask preview) for the page to show. Torch-free: the Caption tab reads these back."""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from trainers.core import events as ev
from trainers.core.job import JOB_EVENTS, JobProgress


@dataclass(frozen=True, kw_only=True)
class ImagesProgress(JobProgress):
    """`done` of `total` images; `images_per_s` over the last few batches (wall clock); skipped (already done) and
    unreadable images are counted apart, not in `done`."""

    type: ClassVar[str] = "images_progress"
    images_per_s: float | None = None
    skipped: int = 0
    unreadable: int = 0


@dataclass(frozen=True, kw_only=True)
class ImageResult(ev.Event):
    """One image's result: its caption, or (masks) the preview of its mask."""

    type: ClassVar[str] = "image_result"
    image: str
    written: str
    caption: str | None = None
    preview: str | None = None


CAPTION_EVENTS: dict[str, type[ev.Event]] = {**JOB_EVENTS, ImagesProgress.type: ImagesProgress,
                                             ImageResult.type: ImageResult}
