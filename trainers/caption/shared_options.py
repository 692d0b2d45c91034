"""The options caption and mask jobs share (images, existing files, resume, batch and device). Torch-free."""
from __future__ import annotations

from typing import Any

from trainers.core.options.schema import Option

EXISTING = ("skip", "overwrite", "append")
PRECISIONS = ("auto", "float", "fp16", "bf16")


def job_option(name: str, kind: str, default: Any, help: str, group: str, verbs: tuple[str, ...], **kw: Any) -> Option:
    return Option(name, kind, default, help, group, methods=frozenset(verbs), **kw)  # type: ignore[arg-type]


BOTH = ("caption", "masks")
CAPTION = ("caption",)

SHARED_OPTIONS: tuple[Option, ...] = (
    job_option("images", "str", "", "The folder of images (searched with its subfolders, so a kohya `N_name` layout works). "
         "Masks: a dataset .toml too (each subset's masks go to its conditioning_data_dir).",
         "input", BOTH, required=True, path="dir"),
    job_option("existing", "str", "skip", "An image that already has its file: skip it, overwrite it, or (captions) append "
         "the new caption to it (tags that are already there are not repeated).", "output", BOTH, choices=EXISTING),
    job_option("resume", "str", "", "A stopped or failed job's folder: the images it finished are not done again, whatever "
         "`existing` says.", "output", BOTH, path="dir", advanced=True),
    job_option("batch_size", "int", 1, "Images per model call (more is faster on a GPU, up to its memory).", "compute",
         BOTH, min=1, max=256),
    job_option("device", "str", "auto", "auto (the first GPU when there is one), cpu, cuda or cuda:N.", "compute", BOTH,
         choices=("auto", "cpu", "cuda"), pattern=r"cuda:\d+", pattern_help="cuda:N"),
    job_option("precision", "str", "auto", "The model's precision (float is fp32); auto: bf16 on a GPU that has it, fp16 "
         "on other GPUs, fp32 on the CPU. The tagger always runs in its file's precision.", "compute", BOTH,
         choices=PRECISIONS),
)
