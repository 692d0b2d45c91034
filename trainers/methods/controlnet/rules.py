"""ControlNet's rules (torch-free): where the control images are, which models it trains for, what it writes.

A control image is the file in conditioning_data_dir with its training image's stem (any image extension), as
sd-scripts reads `--conditioning_data_dir`: for a kohya train_data_dir, conditioning_data_dir has the same
<repeats>_<tokens> subfolders. Validate lists the training images without one before anything loads.
"""
from __future__ import annotations

from pathlib import Path

from trainers.core.errors import ConfigIssue
from trainers.core.options import TrainConfig
from trainers.core.prompts import SamplePrompt, config_prompts
from trainers.data.controls import control_folder, missing_controls_message
from trainers.data.kohya_folders import DatasetLayoutError, match_masks, scan_kohya_folders
from trainers.methods.controlnet.options import FLUX_FAMILIES, FLUX_ONLY, OPTIONS, SD_SCRIPTS
from trainers.models.checks import local_family

FAMILIES = tuple(SD_SCRIPTS)  # UNet models (ControlNetModel copies the UNet's encoder) and FLUX.1 (its transformer's)
SUFFIX = ".safetensors"
OPTION_DEFAULTS = {option.name: option.default for option in OPTIONS}


def family_message(family: str) -> str:
    return (f"is a {family} model; ControlNets are trained for SD1.x/2.x, SDXL and FLUX.1 models (whose UNet or "
            "transformer the ControlNet copies)")


def issues(cfg: TrainConfig) -> list[ConfigIssue]:
    found: list[ConfigIssue] = []

    def bad(name: str, message: str, group: str) -> None:
        found.append(ConfigIssue(name, message, group))

    controls = cfg.conditioning_data_dir.strip()
    if not controls:
        bad("conditioning_data_dir", "is needed: the folder of control images (edge maps, depth, poses...), laid "
            "out like train_data_dir with one image per training image, of the same name", "loss")
    if cfg.dataset_config.strip():
        bad("dataset_config", "is not read by ControlNet training yet: use train_data_dir with "
            "conditioning_data_dir", "dataset")
    if cfg.reg_data_dir.strip():
        bad("reg_data_dir", "has no control images: ControlNet training uses train_data_dir only; clear it",
            "dataset")
    if cfg.validation_split:
        bad("validation_split", "is not supported by ControlNet training yet: set it to 0", "dataset")
    if cfg.masked_loss:
        bad("masked_loss", "reads conditioning_data_dir as masks, which holds the control images here: turn it "
            "off", "loss")
    family = local_family(cfg.pretrained_model_name_or_path)
    if family is not None and family not in FAMILIES:
        bad("pretrained_model_name_or_path", family_message(family), "model")
    if family is not None and family not in FLUX_FAMILIES:
        for name in FLUX_ONLY:
            if cfg.values[name] != OPTION_DEFAULTS[name]:
                bad(name, f"sizes a FLUX.1 ControlNet; this is a {family} model, whose ControlNet copies the "
                    "UNet's encoder: leave it at its default", "controlnet")
    for prompt in sample_prompts(cfg):
        if prompt.control_image and not Path(prompt.control_image).expanduser().is_file():
            bad("sample_prompt_lines", f"prompt {prompt.index + 1}: --cn {prompt.control_image!r} is not an image "
                "file: give the path of the control image its sample is made with", "sampling")
    missing = missing_controls(cfg) if controls and cfg.train_data_dir.strip() else []
    if missing:
        bad("conditioning_data_dir", missing_controls_message(missing), "loss")
    return found


def sample_prompts(cfg: TrainConfig) -> list[SamplePrompt]:
    try:
        return config_prompts(cfg.sample_prompts, cfg.sample_prompt_lines)
    except ValueError:
        return []  # the sampling checks name a prompt that cannot be read


def missing_controls(cfg: TrainConfig) -> list[str]:
    """The training images (subfolder/name) of train_data_dir with no control image; none when the folders
    cannot be read (the dataset checks name those)."""
    try:
        scan = scan_kohya_folders(Path(cfg.train_data_dir).expanduser(), cfg.caption_extension)
    except (DatasetLayoutError, OSError):
        return []
    conditioning = Path(cfg.conditioning_data_dir).expanduser()
    missing = []
    for subset in scan.subsets:
        images = [item.path for item in subset.images]
        found, _ = match_masks(control_folder(conditioning, subset.folder, kohya_root=True), images)
        missing += [f"{subset.folder.name}/{path.name}" for path in images if path not in found]
    return missing


def output_suffix(cfg: TrainConfig) -> str:
    return ""


def outputs(cfg: TrainConfig) -> list[Path]:
    """The diffusers ControlNet folder and the single file beside it."""
    out = Path(cfg.output_dir).expanduser()
    return [out / cfg.output_name, out / f"{cfg.output_name}{SUFFIX}"]


def memory_tips(cfg: TrainConfig) -> list[str]:
    return [] if cfg.gradient_checkpointing else ["turn on gradient_checkpointing"]
