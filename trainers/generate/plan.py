"""A job as work items: what each image is, its seed and its file, fixed before any worker starts.

Nothing here depends on the number of workers: an item's images, seeds and file names follow only
from (variant, prompt, image index), so any worker can render any item and the result is the same.
Torch-free.
"""
from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

from trainers.core.prompts import SamplePrompt
from trainers.generate.options import GenerateConfig, LoraRef, job_prompts, parse_loras, parse_weights
from trainers.generate.saves import Save, find_saves, is_lora_file
from trainers.generate.video import output_suffix


@dataclass(frozen=True)
class Variant:
    """One model setup: the base (or a full-model save) and the LoRAs with their weights."""

    label: str
    loras: tuple[LoraRef, ...] = ()
    model: str = ""  # a full-model save to use instead of the job's model
    save: str = ""  # grid row label (the save)
    weight_label: str = ""  # grid sub-column label (the LoRA weight)


@dataclass(frozen=True)
class Image:
    """One image of a work item."""

    index: int  # the image's number within its prompt
    seed: int
    path: str
    order: int  # position in the job's image list (gallery and grid order)


@dataclass(frozen=True)
class WorkItem:
    """Images of one prompt and variant that a worker renders as one batch."""

    id: int
    variant: int
    prompt: SamplePrompt
    images: tuple[Image, ...]
    width: int | None
    height: int | None
    steps: int
    cfg_scale: float
    frames: int | None = None  # a video model's clip length (the prompt's --f, else the job's; None: the family's)


@dataclass
class Plan:
    variants: list[Variant]
    prompts: list[SamplePrompt]
    items: list[WorkItem]
    seed: int

    @property
    def total_images(self) -> int:
        return sum(len(item.images) for item in self.items)


def resolve_seed(seed: int) -> int:
    return random.SystemRandom().randrange(2**32) if seed < 0 else seed


def image_seed(prompt: SamplePrompt, job_seed: int, index: int) -> int:
    """The prompt's --d (or the job seed) plus the image's index, as A1111 numbers a batch."""
    return (job_seed if prompt.seed is None else prompt.seed) + index


def input_images(cfg: GenerateConfig, prompt: SamplePrompt) -> tuple[str, ...]:
    """An edit model's input images of a prompt: its --ci, else the job's input_image (none for other models)."""
    given = cfg.input_image.strip()
    return prompt.edit_images or ((given,) if given else ())


def compare_saves(cfg: GenerateConfig) -> list[Save]:
    """The grid's rows: the saves of `compare_run`, then the files of `compare_loras`."""
    rows = find_saves(Path(cfg.compare_run).expanduser()) if cfg.compare_run.strip() else []
    for ref in parse_loras(cfg.compare_loras, "compare_loras"):
        rows.append(Save(ref.path, Path(ref.path).stem))
    return rows


def compare_variants(cfg: GenerateConfig, weights: list[float]) -> list[Variant]:
    """One variant per (save, weight); full-model saves (finetune, dreambooth) are rendered at weight 1 only."""
    base_loras = tuple(parse_loras(cfg.loras))
    saves = compare_saves(cfg)
    if not saves:
        raise ValueError("compare_run: no saves found; pick a run that saved at least once, or list compare_loras")
    full = [s for s in saves if not is_lora_file(Path(s.path))]
    if full:
        weights = [1.0]
    variants = []
    for save in saves:
        for w in weights:
            weight_label = f"weight {w:g}" if len(weights) > 1 else ""
            if save in full:
                variants.append(Variant(save.label, base_loras, model=save.path, save=save.label))
            else:
                variants.append(Variant(f"{save.label} {weight_label}".strip(), base_loras + (LoraRef(save.path, w),),
                                        save=save.label, weight_label=weight_label))
    return variants


def build_plan(cfg: GenerateConfig, out_dir: Path, seed: int, variants: list[Variant] | None = None) -> Plan:
    """Work items in a fixed order: variant, then prompt, then batches of `batch_size` images (a video model's
    clips: .mp4 files)."""
    prompts = job_prompts(cfg)
    suffix = output_suffix(cfg.model, cfg.model_family)
    if variants is None:
        if cfg.mode == "compare":
            variants = compare_variants(cfg, parse_weights(cfg.compare_weights))
        else:
            variants = [Variant("", tuple(parse_loras(cfg.loras)))]
    per_prompt = 1 if cfg.mode == "compare" else cfg.images_per_prompt
    batch = 1 if cfg.mode == "compare" else cfg.batch_size
    items: list[WorkItem] = []
    order = 0
    for v, _ in enumerate(variants):
        for prompt in prompts:
            images = []
            for index in range(per_prompt):
                stem = f"{prompt.index:03d}-{index:04d}" if len(variants) == 1 else f"v{v:03d}-{prompt.index:03d}"
                path = str(Path(out_dir) / f"{stem}{suffix}")
                images.append(Image(index, image_seed(prompt, seed, index), path, order))
                order += 1
            for start in range(0, len(images), batch):
                items.append(WorkItem(len(items), v, prompt, tuple(images[start:start + batch]), prompt.width or cfg.width,
                                      prompt.height or cfg.height, prompt.steps or cfg.steps,
                                      cfg.cfg_scale if prompt.cfg_scale is None else prompt.cfg_scale,
                                      prompt.frames or cfg.frames))
    return Plan(variants, prompts, items, seed)
