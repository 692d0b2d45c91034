"""A caption job: the captioner loaded once, then every image not done yet captioned into `<name><ext>` beside it
(trainers/caption/job.py), with the trigger word first and `existing` honoured. Each caption is read and written
holding the dataset folder's edit lock (trainers/dataset_edit/lock.py), as the Dataset tab's bulk edits are: an
edit and the job never write the same folder at once, and an edit it keeps out names the job."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from trainers.caption.events import ImageResult
from trainers.caption.job import ImageJob, SkipImage, run_images, summary_report
from trainers.caption.loading import model_folder, torch_device, torch_dtype
from trainers.caption.options import JobConfig
from trainers.core.fsio import atomic_write_text
from trainers.data.kohya_folders import parse_folder_name
from trainers.data.text_files import decode_caption
from trainers.dataset_edit.lock import folder_lock

JOB_LOCK_WAIT_S = 60.0  # a bulk edit holds the lock for seconds; the job waits that out rather than fail

TAG_SEPARATOR = ", "


def caption_path(image: Path, extension: str) -> Path:
    return image.with_suffix(extension)


def read_caption(path: Path) -> str:
    """An existing caption as the trainer reads it (trainers.data.text_files: UTF-8, or UTF-16/32 as its byte-order
    mark says, else Windows-1252). SkipImage when the file is no caption to the trainer (NUL characters, a mark
    that lies): appending to it would replace text nobody can read back, so it is left as it is."""
    read = decode_caption(path.read_bytes())
    if read.text is None:
        raise SkipImage(f"its caption file {path.name} {read.problem}; it is left as it is: save it as UTF-8 text "
                        "(or delete it), then run again")
    return read.text.strip()


def compose(new: str | list[str], existing: str, cfg: JobConfig) -> str:
    """The caption to write: the trigger word first, then (append) the old caption and the new one. Tags (a list)
    join with commas and are not repeated; sentences follow the old caption after a space."""
    trigger = cfg.trigger_word.strip()
    if isinstance(new, list):
        old = [t.strip() for t in existing.split(",") if t.strip()] if cfg.existing == "append" else []
        tags = [trigger] if trigger else []
        for tag in old + new:
            if tag not in tags:
                tags.append(tag)
        return TAG_SEPARATOR.join(tags)
    body = f"{existing} {new}".strip() if cfg.existing == "append" and existing else new
    if trigger and not body.startswith(trigger):
        body = f"{trigger}{TAG_SEPARATOR}{body}"
    return body


def load_captioner(job: ImageJob) -> Any:
    cfg = job.cfg
    device = torch_device(cfg)
    if cfg.captioner == "wd14":
        from trainers.caption.tagger import MODEL_FILE, TAGS_FILE, load_tagger

        return load_tagger(model_folder(job, [MODEL_FILE, TAGS_FILE]), cfg, device)
    from trainers.caption.vlm import Captioner

    return Captioner(model_folder(job), cfg, device, torch_dtype(cfg, device))


def lock_folder(images: Path) -> Path:
    """The folder whose edit lock guards the captions under `images`: the Dataset tab opens a kohya dataset at the
    parent of its `<repeats>_<name>` folders, so a job on one of those folders locks the parent."""
    return images.parent if parse_folder_name(images.name) is not None else images


def run(cfg: JobConfig, job: ImageJob) -> str:
    captioner = load_captioner(job)
    locked = lock_folder(Path(cfg.images).expanduser())
    holder = f"the caption job {job.folder.name}" if job.folder is not None else "a caption job"

    def write(image: Path, target: Path, result: str | list[str], _: Any) -> ImageResult:
        with folder_lock(locked, JOB_LOCK_WAIT_S, holder):
            existing = read_caption(target) if cfg.existing == "append" and target.exists() else ""
            text = compose(result, existing, cfg)
            atomic_write_text(target, text + "\n")
        return ImageResult(image=str(image), written=str(target), caption=text)

    summary = run_images(job, lambda image: caption_path(image, cfg.caption_extension), captioner, write)
    return summary_report(job, summary, "captions", {"captioner": cfg.captioner})
