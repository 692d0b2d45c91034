"""musubi-tuner's HiDream-O1-Image configs (hidream_o1_train_network.py, hidream_o1_train.py) read as Atelier's
options (torch-free): networks.lora_hidream_o1, or the HiDream-O1 noise options of a finetune's file, name the family;
`dit` is its single file; model_type, noise_scale_start, noise_scale_end and noise_clip_std are ours with musubi's
meaning. `task = 'i2i'` (control images through the vision tower) and the DINOv3 auxiliary loss are refused by name;
its speed-only switches are left out."""
from __future__ import annotations

from typing import Any

from trainers.adapters.kohya.keys import blank
from trainers.core.errors import ConfigIssue

MODULE = "networks.lora_hidream_o1"
FAMILY = "hidream_o1"
FILE_OPTIONS = {"dit": "pretrained_model_name_or_path"}
# keys only its scripts have (a finetune's file names no network module)
OWN_KEYS = frozenset({"noise_scale_start", "noise_scale_end", "noise_clip_std", "skip_t2i_visual_dummy"})
FOLDER_ONLY = ("HiDream-O1-Image has no separate text encoder or VAE (its Qwen3-VL decoder reads the caption, it "
               "denoises pixels): give its one file as dit")
LEFT_OUT = ("skip_t2i_visual_dummy", "fp8_te")  # speed only: no dummy vision pass runs here; text ids are cached
DINO = ("dino_loss_backend", "dino_loss_model_type", "dino_loss_layer", "dino_loss_feature_mode", "dino_loss_resize",
        "dino_loss_use_gram", "dino_loss_no_norm", "dino_loss_use_norm", "dino_loss_every_n_steps")


def claims(flat: dict[str, Any]) -> bool:
    return flat.get("network_module") == MODULE or bool(OWN_KEYS & set(flat))


def read_hidream_o1(out: dict[str, Any], notes: list[str], issues: list[ConfigIssue]) -> None:
    out.setdefault("model_family", FAMILY)
    task = out.pop("task", None)
    if not blank(task) and task != "t2i":
        issues.append(ConfigIssue("task", f"task = {task!r} (musubi-tuner) is refused: HiDream-O1-Image trains "
                                  "text-to-image (t2i) only here; control/reference (i2i) training is not available"))
    weight = out.pop("dino_loss_weight", None)
    if not blank(weight) and float(weight) != 0:
        issues.append(ConfigIssue("dino_loss_weight", f"dino_loss_weight = {weight!r} (musubi-tuner) is refused: "
                                  "the DINOv3 auxiliary loss is not available here"))
    dropped = [name for name in (*LEFT_OUT, *DINO) if not blank(out.pop(name, None))]
    if dropped:
        notes.append(f"musubi-tuner's HiDream-O1 options left out: {', '.join(dropped)} (speed only here, or the "
                     "DINOv3 loss's settings)")
