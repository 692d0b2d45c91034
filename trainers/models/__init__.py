"""Model families as plug-ins: detect which one a model is, then load it through that plug-in.

Adding a family (SD3, FLUX, ...) means a new module with a ModelFamily and one entry in FAMILIES.
"""
from __future__ import annotations

from pathlib import Path

from trainers.models.base import LoadedModel, ModelFamily, ModelLoadError, SizeConditioning, read_json
from trainers.models.sd.family import SD1, SD2
from trainers.models.sdxl.family import SDXL
from trainers.models.single_file import SINGLE_FILE_SUFFIXES, load_single_file, save_full_model

FAMILIES: dict[str, ModelFamily] = {f.name: f for f in (SD1, SD2, SDXL)}

__all__ = ["FAMILIES", "SINGLE_FILE_SUFFIXES", "LoadedModel", "ModelFamily", "ModelLoadError", "SizeConditioning",
           "detect_family", "load_model", "load_single_file", "resolve_model_folder", "save_full_model"]


def resolve_model_folder(name_or_path: str) -> Path:
    """A local diffusers folder as it is, or a hub id fetched (or found in the cache) as one."""
    path = Path(name_or_path).expanduser()
    if path.is_dir():
        return path
    if path.exists():
        raise ModelLoadError(f"pretrained_model_name_or_path: {path} is a file but not a .safetensors or .ckpt "
                             "checkpoint; give a diffusers model folder or a single-file checkpoint")
    from huggingface_hub import snapshot_download

    try:
        return Path(snapshot_download(
            name_or_path,
            allow_patterns=["model_index.json", "*/*.json", "*/*.txt", "*/*.safetensors"],
            ignore_patterns=["*.fp16.*", "*non_ema*", "*.ema.*"],
        ))
    except Exception as err:  # noqa: BLE001 - hub errors come in many types; the message is what matters
        raise ModelLoadError(
            f"pretrained_model_name_or_path: {name_or_path!r} is not a local folder and could not be fetched "
            f"from the hub ({type(err).__name__}: {err})") from None


def detect_family(folder: Path) -> ModelFamily:
    """Tell SD1.x, SD2.x and SDXL apart from the pipeline class and UNet config."""
    index = read_json(folder / "model_index.json") if (folder / "model_index.json").exists() else {}
    unet_cfg = read_json(folder / "unet" / "config.json")
    pipeline = str(index.get("_class_name", ""))
    if "XL" in pipeline or unet_cfg.get("addition_embed_type") == "text_time" or (folder / "text_encoder_2").is_dir():
        return SDXL
    cross_dim = unet_cfg.get("cross_attention_dim")
    if pipeline.startswith("StableDiffusion") or cross_dim in (768, 1024):
        return SD2 if cross_dim == 1024 else SD1
    found = f"pipeline class {pipeline!r}" if pipeline else f"a UNet with cross_attention_dim={cross_dim!r}"
    raise ModelLoadError(
        f"pretrained_model_name_or_path: cannot tell the model family of {folder}: found {found}. "
        "Supported: SD1.x, SD2.x and SDXL diffusers folders. If it is one of these, set model_family.")


def load_model(name_or_path: str, requested_family: str, weight_dtype, vae_path: str = "",
               random_init: bool = False) -> LoadedModel:
    path = Path(name_or_path).expanduser()
    if path.is_file() and path.suffix.lower() in SINGLE_FILE_SUFFIXES:  # SD1.x/2.x/SDXL in the original layout
        return load_single_file(path, requested_family, weight_dtype, vae_path)
    folder = resolve_model_folder(name_or_path)
    detected = detect_family(folder)
    if requested_family != "auto" and requested_family != detected.name:
        family = FAMILIES[requested_family]
        if {family.name, detected.name} != {"sd1", "sd2"}:  # SD1/SD2 differ only in sizes; trust the user
            raise ModelLoadError(
                f"model_family = {requested_family!r}, but {folder} looks like an {detected.title} model; "
                "set model_family = 'auto' or pick the right model")
        detected = family
    return detected.load(folder, weight_dtype, vae_path, random_init)
