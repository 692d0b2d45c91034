"""Loading the model a run names: a local diffusers folder, a hub id fetched as one, or a single-file checkpoint."""
from __future__ import annotations

from pathlib import Path

from trainers.core.paths import is_hub_id
from trainers.models.base import LoadedModel, ModelFamily, ModelFiles, ModelLoadError
from trainers.models.families import family
from trainers.models.pending_encoders import deferring_text_encoders
from trainers.models.rules import SINGLE_FILE_SUFFIXES, folder_rules, rules_of
from trainers.models.single_file import load_single_file


def resolve_model_folder(name_or_path: str) -> Path:
    """A local diffusers folder as it is, or a hub id fetched (or found in the cache) as one."""
    path = Path(name_or_path).expanduser()
    if path.is_dir():
        return path
    if path.exists():
        raise ModelLoadError(f"pretrained_model_name_or_path: {path} is a file but not a .safetensors or .ckpt "
                             "checkpoint; give a diffusers model folder or a single-file checkpoint")
    if not is_hub_id(name_or_path):  # the page's check decides by the same function
        raise ModelLoadError(f"pretrained_model_name_or_path: {name_or_path!r} is neither a local folder nor a hub "
                             "id (owner/name); check the path")
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
    """The family of a diffusers folder, from its pipeline class and UNet config (the most specific claim wins)."""
    return family(folder_rules(folder).name)


def load_model(name_or_path: str, requested_family: str, weight_dtype, vae_path: str = "",
               random_init: bool = False, files: ModelFiles = ModelFiles(),
               defer_text_encoders: bool = False) -> LoadedModel:
    """The model a run names; `files`: its separate component files (FLUX.1 from a transformer-only file).
    `defer_text_encoders`: a diffusers folder's text encoders are read when first needed (pending_encoders.py: a run
    whose texts are all in its disk cache never reads them); a single file's are read with it."""
    path = Path(name_or_path).expanduser()
    if path.is_file() and path.suffix.lower() in SINGLE_FILE_SUFFIXES:  # a checkpoint in the original layout
        return load_single_file(path, requested_family, weight_dtype, vae_path, files=files)
    folder = resolve_model_folder(name_or_path)
    detected = detect_family(folder)
    if requested_family != "auto" and requested_family != detected.name:
        if not detected.accepts(rules_of(requested_family), single_file=False):
            raise ModelLoadError(
                f"model_family = {requested_family!r}, but {folder} looks like a model of the {detected.title} "
                "family; set model_family = 'auto' or pick the right model")
        detected = family(requested_family)  # families of one plug-in class (SD1/SD2) differ only in sizes
    with deferring_text_encoders(defer_text_encoders):
        return detected.load(folder, weight_dtype, vae_path, random_init)
