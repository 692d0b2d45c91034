"""Everything a video run trains on, found before any model loads: clips, their captions, the windows each takes for
each target frame count, and their buckets (frames, width, height). Torch-free.

``build_video_catalog(specs, ...)`` reads musubi-tuner's datasets (trainers/data/video_toml.py): a video_directory's
clips (files, and folders of numbered images) with a caption file beside each, or a JSONL list; an image dataset's
images, and images found beside the clips, train as 1-frame clips. Each clip is probed (trainers/data/clips.py),
its frames dropped from source_fps to the family's rate, and cut into windows (trainers/data/frames.py). A clip that
does not open, has no caption, or is shorter than every target length is skipped with a line naming it; none of that
is fatal unless nothing is left. The image catalog (catalog.py) is not involved: image families keep their own.
"""
from __future__ import annotations

import os
from collections import Counter
from collections.abc import Hashable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from trainers.data.buckets import AreaBucketChooser, BucketBatchSampler, FrameBucket
from trainers.data.catalog import SkippedFile
from trainers.data.clips import ClipError, ClipInfo, folder_frames, is_image_file, is_video_file, probe_clip
from trainers.data.frames import frame_indices, kept_frames, target_lengths
from trainers.data.kohya_folders import DatasetLayoutError
from trainers.data.probe import ImageSkipped, probe_image
from trainers.data.text_files import decode_caption
from trainers.data.video_toml import FIELD, VideoDatasetSpec, read_jsonl

VideoBucketKey = tuple[int, int, int, int]  # (dataset, frames, width, height)


@dataclass(frozen=True)
class CatalogClip:
    """One window of one clip, as it trains."""

    path: Path  # the clip file, its frames folder, or the image
    caption: str
    info: ClipInfo
    frames: tuple[int, ...]  # the source frame numbers the window takes, in order
    bucket: tuple[int, int]  # (width, height)
    dataset: int
    is_image: bool = False

    @property
    def frame_bucket(self) -> FrameBucket:
        return (len(self.frames), *self.bucket)


@dataclass
class VideoCatalog:
    datasets: list[VideoDatasetSpec]
    clips: list[CatalogClip]  # every window of every clip
    samples: list[int]  # clip window of each sample of an epoch (num_repeats)
    skipped: list[SkippedFile] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def bucket_of(self, sample: int) -> VideoBucketKey:
        clip = self.clips[self.samples[sample]]
        return (clip.dataset, *clip.frame_bucket)

    def batch_sampler(self, num_processes: int, seed: int, shuffle: bool = True) -> BucketBatchSampler:
        """Batches from one (dataset, frames, width, height) bucket each, at the dataset's batch_size."""
        buckets: list[Hashable] = [self.bucket_of(i) for i in range(len(self.samples))]
        sizes: dict[Hashable, int] = {b: self.datasets[b[0]].batch_size for b in self.bucket_counts()}
        return BucketBatchSampler(buckets, sizes, num_processes, seed, shuffle)

    def bucket_counts(self) -> dict[VideoBucketKey, tuple[int, int]]:
        """(windows, samples an epoch) per bucket."""
        windows = Counter((c.dataset, *c.frame_bucket) for c in self.clips)
        samples = Counter(self.bucket_of(k) for k in range(len(self.samples)))
        return {key: (windows[key], samples[key]) for key in sorted(windows)}

    def report_lines(self) -> list[str]:
        """What a user reads: the buckets, then a line per skipped clip."""
        lines = [f"dataset {d + 1}: {f} frame(s) at {w}x{h}: {n} window(s), {s} sample(s) an epoch"
                 for (d, f, w, h), (n, s) in self.bucket_counts().items()]
        return lines + [f"skipped {s.path}: {s.reason}" for s in self.skipped]


def build_video_catalog(specs: list[VideoDatasetSpec], frame_rule: int = 4, target_fps: float | None = None,
                        bucket_steps: int = 16, warnings: list[str] | None = None) -> VideoCatalog:
    """The windows of every clip. `frame_rule`: the family's frame count rule, 1 + rule x k (Wan, HunyuanVideo: 4;
    LTX-2: 8); `target_fps`: the family's rate (Wan: 16), frames dropped to it from a dataset's source_fps;
    `bucket_steps`: the side step of buckets (musubi-tuner: 16). DatasetLayoutError when no window is left."""
    warnings = [] if warnings is None else warnings
    clips: list[CatalogClip] = []
    samples: list[int] = []
    skipped: list[SkippedFile] = []
    for number, spec in enumerate(specs):
        chooser = AreaBucketChooser(spec.resolution, spec.enable_bucket, spec.bucket_no_upscale, bucket_steps)
        items, problems = _items(spec)
        warnings.extend(f"{spec.label}: {p}" for p in problems)
        infos = _probe_all([path for path, _ in items])
        for (path, caption), info in zip(items, infos):
            try:
                found = info if isinstance(info, str) else _windows(spec, info, caption, number, chooser, frame_rule,
                                                                    target_fps)
            except ClipError as err:
                skipped.append(SkippedFile(err.path, err.reason))
                continue
            if isinstance(found, str):
                skipped.append(SkippedFile(path, found))
                continue
            for clip in found:
                samples += [len(clips)] * spec.num_repeats
                clips.append(clip)
        warnings.extend(_rate_notes(spec, [i for i in infos if not isinstance(i, str)], target_fps))
    catalog = VideoCatalog(list(specs), clips, samples, skipped, warnings)
    if not clips:
        reasons = Counter(s.reason for s in skipped)
        raise DatasetLayoutError("no usable clips: every clip and image was skipped\n" + "\n".join(
            f"  {count} x {reason}" for reason, count in reasons.most_common()) if reasons else
            "no clips or images found in " + ", ".join(str(s.source) for s in specs), field=FIELD)
    return catalog


def _items(spec: VideoDatasetSpec) -> tuple[list[tuple[Path, str | None]], list[str]]:
    """(media, caption or None: read it from the caption file) of a dataset, and problems with its listing."""
    if spec.jsonl is not None:
        return read_jsonl(spec.jsonl, spec.is_image)  # type: ignore[return-value]
    folder = spec.directory
    assert folder is not None
    try:
        entries = sorted(folder.iterdir(), key=lambda p: p.name)
    except OSError as err:
        return [], [f"{folder} cannot be read ({err.strerror or err})"]
    media = [p for p in entries if p.is_file() and (is_image_file(p) or (not spec.is_image and is_video_file(p)))]
    if not spec.is_image:  # a subfolder of images is one clip, its frames in name order
        media += [p for p in entries if p.is_dir() and not p.name.startswith(".") and _has_images(p)]
    return [(p, None) for p in sorted(media, key=lambda p: p.name)], []


def _has_images(folder: Path) -> bool:
    try:
        return bool(folder_frames(folder))
    except ClipError:
        return True  # probing names it


def _caption(spec: VideoDatasetSpec, path: Path) -> str:
    """The caption file beside a clip (clip.mp4 -> clip.txt; a frames folder walk/ -> walk.txt)."""
    file = path.with_name(path.name + spec.caption_extension) if path.is_dir() else path.with_suffix(
        spec.caption_extension)
    try:
        raw = file.read_bytes()
    except OSError:
        raise ClipError(path, f"no caption file {file.name} ({spec.caption_extension} beside the clip)") from None
    text = decode_caption(raw)
    if text.text is None:
        raise ClipError(path, f"caption file {file.name} {text.problem}")
    return text.text.strip()


def _probe(path: Path) -> ClipInfo | str:
    """A clip's (or an image's: 1 frame) facts, or why it is skipped."""
    try:
        if is_image_file(path) and not path.is_dir():
            return ClipInfo(path, 1, None, probe_image(path))
        return probe_clip(path)
    except ImageSkipped as err:
        return err.reason
    except ClipError as err:
        return err.reason


def _probe_all(paths: list[Path]) -> list[ClipInfo | str]:
    """Headers are read in parallel (network drives), as catalog.py reads images'."""
    if len(paths) < 16:
        return [_probe(p) for p in paths]
    with ThreadPoolExecutor(max_workers=min(8, (os.cpu_count() or 2) * 2)) as pool:
        return list(pool.map(_probe, paths))


def _rate_notes(spec: VideoDatasetSpec, infos: list[ClipInfo], target_fps: float | None) -> list[str]:
    """Clips whose rate is not the family's while source_fps is unset: trained frame by frame (musubi-tuner's
    meaning), which plays them slower or faster than they were shot."""
    if spec.is_image or spec.source_fps or not target_fps:
        return []
    rates = Counter(round(i.fps, 2) for i in infos if i.fps and abs(i.fps - target_fps) > 0.5)
    if not rates:
        return []
    listed = ", ".join(f"{n} at {fps:g} fps" for fps, n in sorted(rates.items()))
    return [f"{spec.label}: {listed}: every frame is trained (the model's rate is {target_fps:g} fps); set "
            "source_fps to the clips' rate to drop frames to it"]


def _windows(spec: VideoDatasetSpec, info: ClipInfo, caption: str | None, dataset: int, chooser: AreaBucketChooser,
             frame_rule: int, target_fps: float | None) -> list[CatalogClip] | str:
    """The clip's windows, or why it gives none."""
    path = info.path
    image = is_image_file(path) and not path.is_dir()
    text = caption if caption is not None else _caption(spec, path)
    bucket = chooser.choose(*info.size)
    if bucket is None:
        return f"too small ({info.size[0]}x{info.size[1]}) for a bucket with bucket_no_upscale"
    if image:
        return [CatalogClip(path, text, info, (0,), bucket, dataset, is_image=True)]
    windows = frame_indices(info.frames, spec.target_frames, spec.frame_extraction, spec.frame_stride,
                            spec.frame_sample, spec.max_frames, spec.source_fps, target_fps, frame_rule)
    if not windows:
        lengths = target_lengths(spec.target_frames, frame_rule)
        kept = len(kept_frames(info.frames, spec.source_fps, target_fps))
        dropped = f" ({kept} after the source_fps drop)" if kept != info.frames else ""
        return (f"{info.frames} frame(s){dropped}, shorter than every target_frames length "
                f"({', '.join(map(str, lengths))})")
    return [CatalogClip(path, text, info, window, bucket, dataset) for window in windows]
