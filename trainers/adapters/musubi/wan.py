"""musubi-tuner's Wan training configs (wan_train_network.py: `task`, `dit`, `dit_high_noise`, `t5`, `clip`, `vae`,
`timestep_boundary`, `offload_inactive_dit`, ...) read as Atelier's options (torch-free). Its `task` names the family
(Wan 2.1 T2V or I2V, or the Wan 2.2 A14B pair) and the published diffusers folder; its model files (dit, t5, vae,
and the pair's dit_high_noise or Wan 2.1 I2V's clip: Wan-AI's or ComfyUI's) are read as the family's single files,
a file another family's (clip for a T2V task) refused by name; with the A14B pair, `dit_high_noise` beside `dit` is
musubi-tuner's "train both experts" (train_expert = "both"), `dit` alone one expert, told by min_timestep and
max_timestep as its docs advise setting them (its file alone is refused: the pair is read from both files).
offload_inactive_dit is ours too."""
from __future__ import annotations

from typing import Any

from trainers.adapters.kohya.keys import blank
from trainers.adapters.musubi.model_files import refuse_model_files, set_published_folder
from trainers.core.errors import ConfigIssue

MODULE = "networks.lora_wan"
# musubi-tuner's Wan tasks trained here -> (model_family, the published diffusers folder, the task's boundary)
TASKS: dict[str, tuple[str, str, float | None]] = {
    "t2v-1.3B": ("wan21", "Wan-AI/Wan2.1-T2V-1.3B-Diffusers", None),
    "t2v-14B": ("wan21", "Wan-AI/Wan2.1-T2V-14B-Diffusers", None),
    "t2v-A14B": ("wan22", "Wan-AI/Wan2.2-T2V-A14B-Diffusers", 0.875),
    "i2v-A14B": ("wan22", "Wan-AI/Wan2.2-I2V-A14B-Diffusers", 0.9),
    "i2v-14B": ("wan21_i2v", "Wan-AI/Wan2.1-I2V-14B-480P-Diffusers", None),
    # musubi-tuner names it (SUPPORTED_SIZES) but has no training config for it: read as the family that trains it
    "ti2v-5B": ("wan22_ti2v", "Wan-AI/Wan2.2-TI2V-5B-Diffusers", None),
}
# its other tasks, refused by name
OTHER_TASKS: dict[str, str] = {
    "flf2v-14B": "Wan 2.1's first-last-frame model is not trained here",
    "t2i-14B": "Wan 2.1's text-to-image task is not trained here: train t2v-14B on images (1-frame clips)",
    "t2v-1.3B-FC": "Wan-Fun Control models are not trained here", "t2v-14B-FC": "Wan-Fun Control models are not "
    "trained here", "i2v-14B-FC": "Wan-Fun Control models are not trained here",
}
DEFAULT_TASK = "t2v-14B"  # musubi-tuner's --task default
_FILES = ("dit", "dit_high_noise", "t5", "clip", "vae", "text_encoder")
_SPLIT = {"dit": "pretrained_model_name_or_path", "text_encoder": "text_encoder", "vae": "ae"}
# the model files each Wan family reads (its t5 as text_encoder first), musubi-tuner's names -> ours (options.py
# reads them; trainers/models/wan/ the files): the Wan 2.2 pair's low-noise expert is dit, the high-noise one
# dit_high_noise; Wan 2.1 I2V's CLIP image encoder is clip
FILE_OPTIONS: dict[str, dict[str, str]] = {"wan21": _SPLIT, "wan22": {**_SPLIT, "dit_high_noise": "dit_high_noise"},
                                           "wan21_i2v": {**_SPLIT, "clip": "clip"}, "wan22_ti2v": _SPLIT}
REFUSED: dict[str, str] = {
    "force_v2_1_time_embedding": "Wan 2.2's time embedding is trained as the model has it",
    "one_frame": "samples are rendered as clips (one-frame inference is not available)",
}
LEFT_OUT = ("vae_cache_cpu", "sample_solver", "lazy_loading")  # speed or sampling only here


def is_video_family(name: str) -> bool:
    """Whether `name` (model_family) is a video family, whose runs read musubi-tuner's dataset TOMLs as they are."""
    from trainers.models.rules import rules_of

    try:
        return bool(rules_of(name).is_video)
    except KeyError:
        return False


def read_wan(out: dict[str, Any], notes: list[str], issues: list[ConfigIssue]) -> None:
    """A networks.lora_wan config's task (the family), model files and Wan options, in place."""
    task = str(out.pop("task", None) or DEFAULT_TASK)
    if task in OTHER_TASKS or task not in TASKS:
        why = OTHER_TASKS.get(task, f"not a Wan task musubi-tuner trains: choose one of {', '.join(TASKS)}")
        issues.append(ConfigIssue("task", f"task = {task!r} (musubi-tuner) is refused: {why}"))
        task = DEFAULT_TASK
    family, folder, boundary = TASKS[task]
    out["model_family"], out["network_module"] = family, "networks.lora"
    notes.append(f"network_module = {MODULE!r} with task = {task!r} (musubi-tuner) is read as model_family = "
                 f"{family!r} with network_module = 'networks.lora' (its LoRA keys are musubi-tuner's names)")
    both, one = not blank(out.get("dit_high_noise")), not blank(out.get("dit"))
    if not blank(out.get("t5")):  # its UMT5 file is musubi-tuner's t5
        out["text_encoder"] = out.pop("t5")
    read = set(FILE_OPTIONS[family])
    if family == "wan22" and one and not both:  # one expert's file: the pair is read from both of its files
        issues.append(ConfigIssue("dit", f"dit = {out['dit']!r} without dit_high_noise (musubi-tuner: one expert's "
                                  "file) is refused: a Wan 2.2 pair is read from both experts' files here (dit the "
                                  "low-noise one, dit_high_noise the high-noise one) or from its diffusers folder "
                                  f"(task {task}: {folder}); train_expert chooses the expert trained"))
        out.pop("dit")
    given = refuse_model_files(out, issues, [name for name in _FILES if name not in read],
                               "Wan's model files (Wan-AI's or ComfyUI's)", task, folder)
    if blank(out.get("pretrained_model_name_or_path")) and not given and blank(out.get("dit")):
        set_published_folder(out, notes, task, folder)
    if family == "wan22":
        if both or one:  # without dit: train_expert as the file says (ours: both)
            _expert(out, both, boundary or 0.875, notes, issues)
    elif not blank(out.get("timestep_boundary")):
        out.pop("timestep_boundary")
        notes.append(f"timestep_boundary (musubi-tuner) is left out: task {task!r} has one transformer")
    if out.pop("fp8_t5", False):
        out["text_encoder_precision"] = "fp8"
        notes.append("fp8_t5 (musubi-tuner) is read as text_encoder_precision = 'fp8'")
    for name, why in REFUSED.items():
        if out.get(name) not in (None, False, "", 0):
            issues.append(ConfigIssue(name, f"{name} = {out[name]!r} (musubi-tuner) is refused: {why}"))
        out.pop(name, None)
    dropped = [name for name in LEFT_OUT if not blank(out.pop(name, None))]
    if dropped:
        notes.append(f"musubi-tuner's Wan options left out: {', '.join(dropped)} (speed or sampling only here)")


def _expert(out: dict[str, Any], both: bool, default: float, notes: list[str], issues: list[ConfigIssue]) -> None:
    """Which A14B expert musubi-tuner's file trains: both with dit_high_noise; else the one its min_timestep /
    max_timestep name (its docs: the high-noise model above the boundary, the low-noise one below)."""
    value = out.get("timestep_boundary")
    boundary = default if blank(value) else float(value) / 1000 if float(value) > 1 else float(value)
    if both:
        out["train_expert"] = "both"
        notes.append("dit_high_noise beside dit (musubi-tuner: both experts) is read as train_expert = 'both' (a "
                     "LoRA per expert here; musubi-tuner trains one over both)")
        return
    low, high = out.get("min_timestep"), out.get("max_timestep")
    if low is not None and float(low) >= boundary * 1000:
        expert = "high_noise"
    elif high is not None and float(high) <= boundary * 1000:
        expert = "low_noise"
    else:
        issues.append(ConfigIssue("train_expert", "dit without dit_high_noise (musubi-tuner) trains one Wan 2.2 "
                                  "expert, which its file does not say: set train_expert = 'high_noise' or "
                                  "'low_noise' (or min_timestep/max_timestep on one side of the boundary)"))
        return
    out["train_expert"] = expert
    for name in ("min_timestep", "max_timestep"):
        out.pop(name, None)
    notes.append(f"dit alone with min_timestep/max_timestep on one side of the boundary is read as train_expert = "
                 f"{expert!r} (its timesteps are scaled into its range, as musubi-tuner's range does)")
