"""Dreambooth class (regularization) images: generate the missing ones with the base model before training.

They go to `<reg_data_dir>/<repeats>_<class_prompt>/` (kohya layout; an existing folder for the
class prompt is reused, else `1_<class_prompt>` is made). Images already there count, so an
interrupted generation resumes where it stopped. Each rank renders its share of the prompts.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from trainers.core.events import ClassImages
from trainers.core.options import TrainConfig, parse_resolution
from trainers.data.kohya_folders import IMAGE_EXTENSIONS, parse_folder_name


def class_folder(reg_dir: Path, class_prompt: str) -> Path:
    safe = re.sub(r'[\\/:*?"<>|\0]', "_", class_prompt.strip())
    if reg_dir.is_dir():
        for sub in sorted(reg_dir.iterdir()):
            parsed = parse_folder_name(sub.name) if sub.is_dir() else None
            if parsed and parsed[1] == safe:
                return sub
    return reg_dir / f"1_{safe}"


def missing_class_images(cfg: TrainConfig) -> tuple[Path, list[int]]:
    """(class folder, indices of the `class_NN` images to generate)."""
    folder = class_folder(Path(cfg.reg_data_dir).expanduser(), cfg.class_prompt)
    images = {p.name for p in folder.iterdir() if p.suffix.lower() in IMAGE_EXTENSIONS} if folder.is_dir() else set()
    missing = max(0, cfg.num_class_images - len(images))
    indices = [i for i in range(cfg.num_class_images + len(images)) if _name(i) not in images]
    return folder, indices[:missing]


def _name(index: int) -> str:
    from trainers.core.prompts import SamplePrompt
    from trainers.sampling.pipeline import sample_path

    return sample_path(Path("."), "class", SamplePrompt("", index=index)).name


def generate_class_images(cfg: TrainConfig, accelerator: Any, events: Any, weight_dtype: Any) -> int:
    """Generate what is missing (all ranks take part); returns how many images were made."""
    if not (cfg.class_prompt.strip() and cfg.num_class_images and cfg.reg_data_dir.strip()):
        return 0
    folder, indices = missing_class_images(cfg)
    accelerator.wait_for_everyone()  # every rank saw the same folder before any writes
    if not indices:
        return 0
    import torch

    from trainers.core.prompts import SamplePrompt
    from trainers.models import ModelFiles, load_model
    from trainers.sampling.pipeline import generate_samples

    if accelerator.is_main_process:
        message = f"generating {len(indices)} class image(s) for {cfg.class_prompt!r} in {folder}"
        print(message, flush=True)
        events.emit(ClassImages(folder=str(folder), count=len(indices), prompt=cfg.class_prompt))
    folder.mkdir(parents=True, exist_ok=True)
    model = load_model(cfg.pretrained_model_name_or_path, cfg.model_family, weight_dtype, cfg.vae.strip(),
                       files=ModelFiles.from_values(cfg.values))
    for m in (model.unet, model.vae, *model.text_encoders):
        m.to(accelerator.device)
    prompts = [SamplePrompt(cfg.class_prompt, index=i) for i in indices]
    generate_samples(model, prompts, folder, "class", sampler=cfg.sample_sampler,
                     default_size=parse_resolution(cfg.resolution), default_steps=cfg.sample_steps,
                     default_cfg=cfg.sample_cfg_scale, base_seed=cfg.seed, rank=accelerator.process_index,
                     world_size=accelerator.num_processes, clip_skip=cfg.clip_skip, device=accelerator.device,
                     dtype=weight_dtype)
    del model
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    accelerator.wait_for_everyone()
    return len(indices)
