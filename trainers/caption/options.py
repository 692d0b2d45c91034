"""The options of caption and mask jobs, declared once: CLI flags, the Caption tab's forms, a job's TOML and the
checks come from here. Torch-free: the GUI imports this on the request path.

Names follow kohya_ss's captioning utilities where they have one (general_threshold, character_threshold,
undesired tags as tag_blacklist, caption_extension), so a kohya_ss user finds them.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from trainers.caption.shared_options import CAPTION, SHARED_OPTIONS, job_option
from trainers.core.options.jobs import options_markdown as job_docs
from trainers.core.options.schema import ConfigIssue, Option
from trainers.core.options.verbs import VerbConfig
from trainers.core.paths import is_hub_id
from trainers.core.rundir import new_run_dir
from trainers.caption.mask_options import MASK_OPTIONS, METHODS, check_masks

JOB_METHOD = "caption"  # status.json's method of caption and mask jobs (which one is its `verb`)
VERBS: dict[str, str] = {
    "caption": "write a caption file beside each image: tags (WD14 tagger) or sentences (a vision-language model)",
    "masks": "write a loss mask for each image (masked_loss): CLIPSeg by a text prompt, or background removal",
}
GROUPS: dict[str, str] = {"input": "Images and model", "output": "Where captions go", "tagger": "Tagger",
                          "text": "Sentences", "mask": "Masks", "compute": "Batch and device"}

# captioner -> (model class family, the model used when `model` is empty)
CAPTIONERS: dict[str, str] = {
    "wd14": "SmilingWolf/wd-vit-tagger-v3",
    "florence2": "florence-community/Florence-2-base",
    "qwen2_5_vl": "Qwen/Qwen2.5-VL-3B-Instruct",
    "joycaption": "fancyfeast/llama-joycaption-beta-one-hf-llava",
    "blip": "Salesforce/blip-image-captioning-large",
}
# prompt_template -> the instruction a chat captioner (Qwen2.5-VL, JoyCaption) gets; Florence-2 maps these to its
# task tokens (florence2.TASKS); BLIP takes no instruction (a custom prompt is the caption's start)
TEMPLATES: dict[str, str] = {
    "detailed": "Write a detailed description of this image in one paragraph, for training an image model.",
    "short": "Write a one-sentence caption for this image.",
    "prompt": "Write a Stable Diffusion prompt for this image: the subject first, then style, lighting and setting.",
    "tags": "Write a comma-separated list of booru-style tags for this image.",
}
CAPTION_OPTIONS: tuple[Option, ...] = (
    SHARED_OPTIONS[0],
    job_option("captioner", "str", "wd14", "wd14: booru tags from a WD14-family ONNX tagger; florence2, qwen2_5_vl, "
         "joycaption: sentences from a vision-language model; blip: short sentences (older setups).", "input",
         CAPTION, choices=tuple(CAPTIONERS)),
    job_option("model", "str", "", "A local model folder or a hub id (downloaded once, with progress); empty: the "
         "captioner's usual model (see docs/captioning.md). A tagger folder holds model.onnx and selected_tags.csv.",
         "input", CAPTION, path="any"),
    job_option("caption_extension", "str", ".txt", "The caption file beside each image: its name with this extension.",
         "output", CAPTION, pattern=r"\.[A-Za-z0-9_]+"),
    SHARED_OPTIONS[1],
    job_option("trigger_word", "str", "", "Put first in every caption (e.g. `sks`), followed by the separator.", "output",
         CAPTION),
    SHARED_OPTIONS[2],
    job_option("general_threshold", "float", 0.35, "A general tag is kept when the tagger's confidence is at least this.",
         "tagger", CAPTION, min=0, max=1),
    job_option("character_threshold", "float", 0.85, "A character tag is kept when the tagger's confidence is at least this.",
         "tagger", CAPTION, min=0, max=1),
    job_option("tag_blacklist", "list", [], "Tags never written (one a line, or comma-separated), as written in "
         "selected_tags.csv or with spaces.", "tagger", CAPTION),
    job_option("replace_underscores", "bool", True, "Write `long hair`, not `long_hair` (emoticons such as ^_^ keep "
         "theirs).", "tagger", CAPTION),
    job_option("include_rating", "bool", False, "Add the most likely rating tag (general, sensitive, questionable, "
         "explicit).", "tagger", CAPTION),
    job_option("character_tags_first", "bool", True, "Character tags before general tags.", "tagger", CAPTION),
    job_option("max_tags", "int", 0, "Keep at most this many general tags, the most confident first (0: all above the "
         "threshold).", "tagger", CAPTION, min=0, advanced=True),
    job_option("prompt_template", "str", "detailed", "What to ask a vision-language model for: detailed, short, prompt "
         "(a text-to-image prompt) or tags. Florence-2: short is <CAPTION>, detailed <DETAILED_CAPTION>, the others "
         "<MORE_DETAILED_CAPTION>.", "text", CAPTION, choices=tuple(TEMPLATES)),
    job_option("prompt", "str", "", "Your own instruction instead of the template ({trigger} is replaced by the trigger "
         "word). BLIP: the caption's first words (e.g. `a photo of`). Florence-2: a task token such as <OCR>.",
         "text", CAPTION),
    job_option("max_new_tokens", "int", 200, "The longest caption, in tokens.", "text", CAPTION, min=1, max=4096),
    job_option("num_beams", "int", 1, "Beam search width (1: greedy, the fastest).", "text", CAPTION, min=1, max=16,
         advanced=True),
    *SHARED_OPTIONS[3:],
)


def options_for(verb: str) -> tuple[Option, ...]:
    if verb == "caption":
        return CAPTION_OPTIONS
    if verb == "masks":
        return MASK_OPTIONS
    raise KeyError(f"no job {verb!r}; the jobs are {', '.join(VERBS)}")


def by_name(verb: str) -> dict[str, Option]:
    return {o.name: o for o in options_for(verb)}


class JobConfig(VerbConfig):
    """A caption or mask job's options with their values (defaults filled in)."""

    groups = GROUPS

    @property
    def title(self) -> str:  # type: ignore[override]
        return f"{self.verb} job"

    @classmethod
    def options_for(cls, verb: str) -> tuple[Option, ...]:
        return options_for(verb)


config_from_values = JobConfig.from_values  # check names and types of {name: value}; ConfigError names every bad one
load_job_config = JobConfig.load  # a job's TOML, then `--set` overrides, then values (VerbConfig.load)


def check_config(cfg: JobConfig) -> list[ConfigIssue]:
    """Every problem found before a model loads, each naming its field and the fix."""
    options = by_name(cfg.verb)
    issues: list[ConfigIssue] = []

    def add(name: str, message: str) -> None:
        issues.append(ConfigIssue(name, message, options[name].group))

    for opt in options.values():
        if opt.required and not str(cfg.values[opt.name]).strip():
            add(opt.name, "give it: it is required")
    images = Path(cfg.images).expanduser()
    toml = cfg.verb == "masks" and images.suffix.lower() == ".toml" and images.is_file()
    if cfg.images.strip() and not images.is_dir() and not toml:
        add("images", f"{images} is not a folder; give the folder that holds the images"
                      + (" (or a dataset .toml: each subset's masks go to its conditioning_data_dir)"
                         if cfg.verb == "masks" else ""))
    if cfg.resume.strip() and not (Path(cfg.resume).expanduser() / DONE_LIST).is_file():
        add("resume", f"{cfg.resume} is not a caption or mask job's folder (it has no {DONE_LIST}); give the folder "
                      "of the job to continue")
    model = str(cfg.values.get("model", "")).strip()
    if model and not Path(model).expanduser().exists() and not is_hub_id(model):
        add("model", f"{model} is neither a folder here nor a hub id (owner/name); check the path")
    if cfg.verb == "masks":
        check_masks(cfg, add)
    return issues


DONE_LIST = "done.txt"  # a job folder's list of the images it finished, one path a line (resume reads it)


def model_source(cfg: JobConfig) -> str:
    """The model a job loads: its `model`, or the captioner's (or mask method's) usual one."""
    given = str(cfg.values.get("model", "")).strip()
    if given:
        return given
    if cfg.verb == "masks":
        return METHODS[cfg.method]
    return CAPTIONERS[cfg.captioner]


def new_job_dir(runs_root: Path, cfg: JobConfig) -> Path:
    """`<runs_root>/<stamp>-<verb>-<folder name>-<pid>` (not created)."""
    folder = Path(cfg.images.rstrip("/\\")).name or "images"
    return new_run_dir(runs_root, f"{cfg.verb}-{folder}")


def options_markdown(verb: str) -> str:
    """The table of a job's options, for docs/captioning.md."""
    return job_docs([("", options_for(verb))])
