"""musubi-tuner's HunyuanVideo 1.5 training configs (hv_1_5_train_network.py: `task`, `dit`, `vae`, `text_encoder`,
`byt5`, `image_encoder`, `vae_sample_size`, ...) read as Atelier's options (torch-free). Its `task` (t2v or i2v) names
the published diffusers folder where no model file is given; its model files (Tencent's and ComfyUI's .safetensors)
are read as the family's single files (image_encoder, SigLIP's, makes the run image-to-video: the i2v task needs it,
the t2v task refuses it), and a folder of the other task is refused by name (the folder's pipeline says which task it
trains)."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from trainers.adapters.kohya.keys import blank
from trainers.adapters.musubi.model_files import set_published_folder
from trainers.core.errors import ConfigIssue

MODULE = "networks.lora_hv_1_5"
FAMILY = "hunyuan_video15"
# musubi-tuner's tasks -> the published diffusers folder (diffusers' pipeline examples)
TASKS: dict[str, str] = {"t2v": "hunyuanvideo-community/HunyuanVideo-1.5-480p_t2v",
                         "i2v": "hunyuanvideo-community/HunyuanVideo-1.5-480p_i2v"}
DEFAULT_TASK = "t2v"  # musubi-tuner's --task default
# its model files, musubi-tuner's names -> ours (options.py reads them; trainers/models/hunyuan_video15/ the files)
FILE_OPTIONS = {"dit": "pretrained_model_name_or_path", "vae": "ae", "text_encoder": "text_encoder", "byt5": "byt5",
                "image_encoder": "image_encoder"}
LEFT_OUT = ("vae_sample_size", "vae_enable_patch_conv")  # its VAE tiling (256-pixel tiles here) and patch convs


def read_hunyuan_video15(out: dict[str, Any], notes: list[str], issues: list[ConfigIssue]) -> None:
    """A networks.lora_hv_1_5 config's task, model files and options, in place."""
    task = str(out.pop("task", None) or DEFAULT_TASK)
    if task not in TASKS:
        issues.append(ConfigIssue("task", f"task = {task!r} (musubi-tuner) is refused: HunyuanVideo 1.5's tasks are "
                                  f"{', '.join(map(repr, TASKS))}"))
        task = DEFAULT_TASK
    folder = TASKS[task]
    out["model_family"], out["network_module"] = FAMILY, "networks.lora"
    notes.append(f"network_module = {MODULE!r} with task = {task!r} (musubi-tuner) is read as model_family = "
                 f"{FAMILY!r} with network_module = 'networks.lora' (its LoRA keys in ComfyUI's names; musubi-tuner's "
                 "own are read too)")
    model = out.get("pretrained_model_name_or_path")
    if not blank(out.get("dit")):
        if blank(out.get("image_encoder")) == (task == "i2v"):
            why = ("the i2v task's file needs its SigLIP image encoder: set image_encoder (ComfyUI's "
                   "clip_vision/sigclip_vision_patch14_384.safetensors)" if task == "i2v" else
                   "image_encoder makes a run image-to-video: leave it out for the t2v task, or set task = 'i2v'")
            issues.append(ConfigIssue("image_encoder", f"task = {task!r} (musubi-tuner): {why}"))
    elif blank(model):
        set_published_folder(out, notes, task, folder)
    elif not blank(model) and (path := Path(str(model)).expanduser()).is_dir():
        from trainers.models.hunyuan_video15.rules import is_i2v_folder

        if is_i2v_folder(path) != (task == "i2v"):
            kind = "an image-to-video" if task == "t2v" else "a text-to-video"
            issues.append(ConfigIssue("task", f"task = {task!r} (musubi-tuner), but {model} is {kind} folder: the "
                                      "folder's pipeline says which task it trains here"))
    dropped = [name for name in LEFT_OUT if not blank(out.pop(name, None))]
    if dropped:
        notes.append(f"musubi-tuner's HunyuanVideo 1.5 options left out: {', '.join(dropped)} (its autoencoder "
                     "tiles clips above 256 pixels here)")
