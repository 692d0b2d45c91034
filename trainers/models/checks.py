"""The checks of a config that depend on its model, read from the model's files before any weight loads: JSON
configs and safetensors headers only (torch-free). `model_issues` is the one function the run, --print-config and
the GUI's Validate reach through trainers/preflight/validate.py; a hub model is checked by the run once it is
fetched.
"""
from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainers.core.errors import ConfigIssue
from trainers.core.fsio import DamagedSafetensors, pickle_problem, read_safetensors_header
from trainers.core.options import BY_NAME
from trainers.core.options.groups.model import COMPONENT_FILE_OPTIONS
from trainers.core.paths import path_problem
from trainers.models.rules import (
    SINGLE_FILE_SUFFIXES,
    UNET_PREFIX,
    CheckpointKeys,
    FamilyRules,
    ModelFiles,
    ModelLoadError,
    checkpoint_rules,
    folder_rules,
    not_a_unet,
    read_json,
    rules_of,
    unknown_checkpoint,
)

MODEL = "pretrained_model_name_or_path"
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".webp", ".bmp")
VAE_WEIGHTS = ("diffusion_pytorch_model.safetensors", "diffusion_pytorch_model.bin")  # what from_pretrained reads
# The weights diffusers' and transformers' from_pretrained read from a component folder (no variant), first found wins
WEIGHT_NAMES = ("diffusion_pytorch_model.safetensors", "model.safetensors", "diffusion_pytorch_model.bin",
                "pytorch_model.bin")


@dataclass(frozen=True)
class Component:
    """A file a component option names: what it must hold, told by tensor names (any one of `keys`, each a prefix
    or a whole name) as the loader (trainers/models/component_files.py) reads them."""

    what: str
    keys: tuple[tuple[str, ...], ...]  # every group must have a key starting with one of its entries

    def found_in(self, shapes: Mapping[str, tuple[int, ...]]) -> bool:
        return all(any(k.startswith(key) for k in shapes for key in group) for group in self.keys)


_CLIP = Component("a CLIP text encoder in transformers' layout (text_model.embeddings..., "
                  "text_model.encoder.layers...)",
                  (("text_model.embeddings.token_embedding.weight", "embeddings.token_embedding.weight"),
                   ("text_model.encoder.layers.", "encoder.layers.")))
COMPONENTS: dict[str, Component] = {
    "clip_l": _CLIP,
    "clip_g": _CLIP,
    "t5xxl": Component("a T5 encoder in transformers' layout (shared.weight, encoder.block...)",
                       (("shared.weight", "encoder.embed_tokens.weight"),
                        ("encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight",))),
    "byt5": Component("a ByT5 glyph encoder in transformers' T5 layout (shared.weight, encoder.block...), as ComfyUI's "
                      "byt5_small_glyphxl_fp16.safetensors",
                      (("shared.weight", "encoder.embed_tokens.weight"),
                       ("encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight",))),
    "ae": Component("an autoencoder (encoder.conv_in, decoder.conv_in...; Wan's encoder.conv1...), as FLUX.1's "
                    "ae.safetensors or Qwen-Image's qwen_image_vae.safetensors",
                    (("encoder.conv_in.weight", "encoder.conv1.weight"), ("decoder.conv_in.weight",
                                                                          "decoder.conv1.weight"))),
    "text_encoder": Component("a language-model text encoder in transformers' layout (model.embed_tokens..., "
                              "model.layers...), as ComfyUI's text_encoders files",
                              (("model.embed_tokens.weight", "embed_tokens.weight"), ("model.layers.", "layers."))),
}
assert set(COMPONENTS) == set(COMPONENT_FILE_OPTIONS), "every component file option is checked"
_KIND_COMPONENTS = {"t5": COMPONENTS["t5xxl"], "llm": COMPONENTS["text_encoder"], "clip_l": _CLIP, "clip_g": _CLIP}


@dataclass
class Model:
    """What the model option names, as far as its files tell before loading."""

    rules: FamilyRules
    config_dir: Path  # its component configs: the folder itself, or the family's shipped arch/ for a single file
    single_file: bool
    reads: frozenset[str] = frozenset()  # the component file options it reads
    latents: int | None = None  # the latent channels its single file's denoiser takes, where the file tells


def model_issues(values: Mapping[str, Any], model: Path | None = None, trains: str = "") -> list[ConfigIssue]:
    """Every problem of a config's options (`values`) with its model: what the model path holds, model_family
    against it, what a single file lacks, the options its family cannot honour, clip_skip against its text encoder,
    and what each component option (vae, clip_l, clip_g, t5xxl, ae) holds. `model`: the local folder of a hub id,
    once fetched (without it a hub id is not checked, but its component options are). `trains`: what the run's
    method trains (the registry's MethodSpec.trains), for the options a family cannot honour in such a run."""
    issues: list[ConfigIssue] = []
    found = _identify(values, model, issues)
    if found is not None:
        issues += found.rules.option_issues(values) + _clip_skip_issues(found, values)
        issues += found.rules.training_issues(trains, values) if trains else []
    return issues + _component_issues(values, found) + lora_file_issues(values)


LORA_FILE_OPTIONS = ("network_weights", "base_weights")  # the LoRA files a run reads besides its model


def lora_file_issues(values: Mapping[str, Any]) -> list[ConfigIssue]:
    """The LoRA files a run reads (network_weights, each base_weights file) that are cut short or damaged, named
    with their option before the model loads."""
    issues = []
    for option in LORA_FILE_OPTIONS:
        given = values.get(option) or []
        for text in [given] if isinstance(given, str) else list(given):
            text = str(text).strip()
            path = None if not text or path_problem(text, "file") else Path(text).expanduser()  # the rest: named
            if path is not None and path.is_file() and (problem := weights_file_problem(path)):
                issues.append(ConfigIssue(option, problem, BY_NAME[option].group))
    return issues


def local_family(name_or_path: str) -> str | None:
    """The family name of a local model read from its files; None for a hub id or a model that cannot be told."""
    path = given_path({MODEL: name_or_path}, MODEL)
    try:
        found = None if path is None else _folder_model(path) if path.is_dir() else _file_model(path, {}, [])
    except ModelLoadError:
        return None
    return found.rules.name if found is not None else None


def given_path(values: Mapping[str, Any], option: str) -> Path | None:
    """The path an option names when it is one of the option's kind on disk; None when it is not set, or when the
    option checks name its problem (missing, too long, a system path, a file for a folder...)."""
    text = str(values.get(option) or "").strip()
    kind = BY_NAME[option].path or "any"
    if not text or path_problem(text, kind):
        return None
    path = Path(text).expanduser()
    return path if path.exists() else None


def _identify(values: Mapping[str, Any], model: Path | None, issues: list[ConfigIssue]) -> Model | None:
    path = model or given_path(values, MODEL)
    if path is None:
        return None  # nothing given (named as required), a path the option checks name, or a hub id
    try:
        found = _folder_model(path) if path.is_dir() else _file_model(path, values, issues)
        if path.is_dir():
            issues += [ConfigIssue(MODEL, problem, "model") for problem in damaged_weights(path)]
    except ModelLoadError as err:
        issues.append(ConfigIssue(MODEL, str(err).removeprefix(f"{MODEL}: "), "model"))
        return None
    if found is None:
        return None
    requested = str(values.get("model_family") or "auto")
    if requested != "auto" and not found.rules.accepts(rules_of(requested), found.single_file):
        issues.append(ConfigIssue("model_family", _family_mismatch(rules_of(requested), found, path), "model"))
        return None  # the family's own checks would be about the wrong family
    unread = [o for o in COMPONENT_FILE_OPTIONS if str(values.get(o) or "").strip() and o not in found.reads]
    issues += [ConfigIssue(o, f"is not read with {path.name}, a {found.rules.name!r} model (separate files are read "
                           "for the parts a single file lacks, those its family names): leave it empty", "model")
               for o in unread]
    return found


def _family_mismatch(requested: FamilyRules, found: Model, path: Path) -> str:
    title = found.rules.title
    if found.single_file and type(requested) is not type(found.rules) and isinstance(requested, type(found.rules)):
        return (f"is {requested.name!r}, but {path} is a single file in the layout of {title} models, which "
                f"{requested.title} files share and which is read as {title} only: give the {requested.title} "
                f"diffusers folder ({getattr(requested, 'pipeline_class', 'model_index.json')}), or set "
                f"model_family = 'auto' to train it as {title}")
    return (f"is {requested.name!r}, but {path} holds a model of the {title} family: set model_family = 'auto' or "
            "pick the right model")


def _folder_model(folder: Path) -> Model:
    if not (folder / "model_index.json").exists() and not (folder / "unet" / "config.json").exists():
        raise ModelLoadError(f"{folder} holds {held_by(folder)}, not a model: give a diffusers model folder (with "
                             "model_index.json) or a single-file .safetensors checkpoint")
    return Model(folder_rules(folder), folder, single_file=False)


def _file_model(path: Path, values: Mapping[str, Any], issues: list[ConfigIssue]) -> Model | None:
    suffix = path.suffix.lower()
    if suffix != ".safetensors":
        if suffix in SINGLE_FILE_SUFFIXES:
            if problem := pickle_problem(path):
                raise ModelLoadError(problem)
            return None  # a pickled checkpoint: only torch reads its names, when the run loads it
        raise ModelLoadError(f"{path} is a file but not a .safetensors or .ckpt checkpoint; give a diffusers model "
                             "folder or a single-file checkpoint")
    try:
        shapes, _ = read_safetensors_header(path, whole=True)
    except ValueError as err:
        raise ModelLoadError(str(err)) from None
    requested = str(values.get("model_family") or "auto")
    rules = checkpoint_rules(shapes, str(path), None if requested == "auto" else rules_of(requested))
    if rules is None:  # only a UNet of unknown width: the user's model_family is trusted
        if requested == "auto":
            raise unknown_checkpoint(str(path))
        rules = rules_of(requested)
    issues += rules.checkpoint_issues(CheckpointKeys(shapes, str(path)), ModelFiles.from_values(values),
                                      str(values.get("vae") or "").strip())
    reads = {p.option for p in rules.checkpoint_parts if p.option} if rules.own_checkpoint_layout else set()
    return Model(rules, rules.arch_dir, single_file=True, reads=frozenset(reads),
                 latents=_denoiser_latents(rules, shapes))


def _clip_skip_issues(found: Model, values: Mapping[str, Any]) -> list[ConfigIssue]:
    clip_skip = values.get("clip_skip", BY_NAME["clip_skip"].default)
    if found.rules.objective != "ddpm" or not isinstance(clip_skip, int) or clip_skip <= 1:
        return []  # the flow families refuse clip_skip with their options
    title = found.rules.title
    if not found.rules.supports_clip_skip:
        return [ConfigIssue("clip_skip", f"is {clip_skip}, but {title} models take no clip skip: set it to 1", "model")]
    try:
        layers = int(read_json(found.config_dir / "text_encoder" / "config.json").get("num_hidden_layers", 0))
    except (ModelLoadError, ValueError, TypeError):
        return []
    if layers and clip_skip > layers:
        return [ConfigIssue("clip_skip", f"is {clip_skip}, but this model's text encoder has {layers} layers: use 1 to "
                            f"{layers}", "model")]
    return []


def _component_issues(values: Mapping[str, Any], found: Model | None) -> list[ConfigIssue]:
    """What the vae folder and the component files hold, for those the model reads (all when it is not known)."""
    issues = []
    vae = given_path(values, "vae")
    if vae is not None:
        problem = vae_problem(vae, found)
        if problem:
            issues.append(ConfigIssue("vae", problem, "model"))
    for option, component in COMPONENTS.items():
        path = given_path(values, option)
        if path is None or found is not None and option not in found.reads:
            continue
        part = _autoencoder_part(found, option)
        if option == "text_encoder" and found is not None:  # the family's text encoder: its kind's layout (Wan's T5)
            component = _KIND_COMPONENTS.get(_part_kind(found, option), component)
        problem = component_problem(path, component if part is None or found is None else _autoencoder(part, found))
        if problem is None and part is not None and found is not None:
            problem = _latent_problem(path, part, found)
        if problem:
            issues.append(ConfigIssue(option, problem, "model"))
    return issues


def _autoencoder_part(found: Model | None, option: str) -> Any:
    """The family's autoencoder part (flow_rules.Part) an option's file stands in for; None when it names none."""
    parts = found.rules.checkpoint_parts if found is not None else ()
    return next((p for p in parts if p.option == option and p.kind == "vae"), None)


def _part_kind(found: Model, option: str) -> str:
    """The kind (flow_rules.Part.kind) of the family's part an option's file stands in for; "" when none."""
    return next((p.kind for p in found.rules.checkpoint_parts if getattr(p, "option", "") == option), "")


def _autoencoder(part: Any, found: Model) -> Component:
    names = ", ".join(f"{group[0].split('.0.')[0].removesuffix('.weight')}..." for group in part.file_keys)
    return Component(f"the {part.what} that {found.rules.title} models read ({names})", part.file_keys)


def latent_channels(shapes: Mapping[str, tuple[int, ...]]) -> int | None:
    """The latent channels an autoencoder file works in: its decoder's first conv's inputs (the original layout's
    and diffusers' decoder.conv_in, Wan's decoder.conv1); None when it has neither."""
    for key in ("decoder.conv_in.weight", "decoder.conv1.weight"):
        shape = shapes.get(key) or ()
        if len(shape) >= 2:
            return int(shape[1])
    return None


def autoencoder_held(shapes: Mapping[str, tuple[int, ...]]) -> str:
    """What kind of autoencoder a file holds, told by its latent channels (and FLUX.2's batch norm of the
    patchified latents)."""
    channels = latent_channels(shapes)
    norm = shapes.get("bn.running_mean") or ()
    if channels is None:
        return "an autoencoder"
    if norm:
        return f"a FLUX.2 autoencoder with {channels} latent channels ({norm[0]} once patchified)"
    if channels == 4:
        return "an SD/SDXL VAE with 4 latent channels"
    return f"an autoencoder with {channels} latent channels"


def _latent_problem(path: Path, part: Any, found: Model) -> str | None:
    """Why an autoencoder file in the layout the family reads still does not fit it: other latent channels."""
    try:
        shapes, _ = read_safetensors_header(path)
    except ValueError:
        return None  # component_problem names a file that is not one
    channels, needed = latent_channels(shapes), _channels_of_part(part, found)
    if channels is None or not needed or channels == needed:
        return None
    title = found.rules.title
    return (f"{path} holds {autoencoder_held(shapes)}, but {title} models work in {needed} latent channels: give the "
            f"{part.what} that {title} models read")


def _latent_channels_needed(model: Model) -> int | None:
    """The latent channels a model's VAE must have: its own VAE config's, or for a single file without one (SD3,
    FLUX.1...) its autoencoder part's."""
    own = _json_or_none(model.config_dir / "vae" / "config.json")
    if own is not None:
        return own.get("latent_channels")
    part = next((p for p in model.rules.checkpoint_parts if getattr(p, "kind", "") == "vae"), None)
    return _channels_of_part(part, model) if model.single_file and part is not None else None


def _denoiser_latents(rules: FamilyRules, shapes: Mapping[str, tuple[int, ...]]) -> int | None:
    """The latent channels a single file's denoiser takes, read from its input tensor (its autoencoder part's
    `denoiser_input`), or None where the file does not tell."""
    part = next((p for p in getattr(rules, "checkpoint_parts", ()) if getattr(p, "kind", "") == "vae"), None)
    name, per_channel = getattr(part, "denoiser_input", ()) or ("", 0)
    shape = next((v for k, v in shapes.items() if name and (k == name or k.endswith("." + name))), ())
    return int(shape[1]) // per_channel if len(shape) >= 2 and shape[1] % per_channel == 0 else None


def _channels_of_part(part: Any, model: Model) -> int:
    """The latent channels an autoencoder part must work in: what the single file's denoiser takes where its
    file tells, else the family's published count."""
    return model.latents or int(getattr(part, "latent_channels", 0) or 0)


def vae_problem(folder: Path, model: Model | None = None) -> str | None:
    """Why `folder` cannot be read as a diffusers AutoencoderKL (for `model`, when known), or None."""
    expected = "give a diffusers AutoencoderKL folder (config.json and diffusion_pytorch_model.safetensors), e.g. a " \
               "model's vae/ folder"
    config = _json_or_none(folder / "config.json")
    if (folder / "model_index.json").exists() and (folder / "vae").is_dir():
        return f"{folder} holds {held_by(folder)}, not a VAE: its VAE is {folder / 'vae'}"
    if config is None or config.get("_class_name") != "AutoencoderKL":
        return f"{folder} holds {held_by(folder)}, not a VAE: {expected}"
    if not any((folder / name).is_file() for name in VAE_WEIGHTS):
        return f"{folder} holds an AutoencoderKL config.json but no weights ({VAE_WEIGHTS[0]}): {expected}"
    if damaged := damaged_weights(folder):
        return damaged[0]
    mine, theirs = config.get("latent_channels"), _latent_channels_needed(model) if model is not None else None
    if model is not None and mine and theirs and mine != theirs:
        kind = "an SD/SDXL VAE" if mine == 4 else "a VAE"
        return (f"{folder} is {kind} of {mine} latent channels, but {model.rules.title} models work in {theirs}: "
                f"give a VAE made for {model.rules.title}")
    return None


def component_problem(path: Path, component: Component) -> str | None:
    """Why the file at `path` is not `component`, or None (of a pickled file only its container is checked here)."""
    if path.suffix.lower() in SINGLE_FILE_SUFFIXES and path.suffix.lower() != ".safetensors":
        return pickle_problem(path)
    try:
        shapes, _ = read_safetensors_header(path, whole=True)
    except DamagedSafetensors as err:
        return str(err)
    except ValueError:
        return f"{path} is not a .safetensors file: give {component.what}"
    if component.found_in(shapes):
        return None
    return f"{path} holds {_held_in_file(shapes)}, not {component.what}"


def damaged_weights(folder: Path) -> list[str]:
    """What is cut short or damaged among the weight files a diffusers model folder's from_pretrained would read:
    each component folder's (or a component folder's own) weights file, or the shards its index names."""
    problems = []
    for part in [folder, *sorted(p for p in folder.iterdir() if p.is_dir())]:
        for name in WEIGHT_NAMES:
            index = _json_or_none(part / f"{name}.index.json")
            if index is not None:
                shards = sorted(set(map(str, (index.get("weight_map") or {}).values())))
                problems += [f"{part / shard} is missing: {part / (name + '.index.json')} names it as a shard of the "
                             "weights; download or copy the model again" for shard in shards
                             if not (part / shard).is_file()]
                problems += filter(None, (weights_file_problem(part / s) for s in shards if (part / s).is_file()))
                break
            if (part / name).is_file():
                problems += filter(None, [weights_file_problem(part / name)])
                break
    return problems


def weights_file_problem(path: Path) -> str | None:
    """Why a weights file (.safetensors, or a PyTorch zip pickle) is cut short or damaged, or None; torch-free."""
    if path.suffix.lower() != ".safetensors":
        return pickle_problem(path)
    try:
        read_safetensors_header(path, whole=True)
    except ValueError as err:
        return str(err)
    return None


def held_by(path: Path) -> str:
    """What a folder or file holds, in a few words, read from its names, JSON configs and safetensors header."""
    if path.is_file():
        try:
            return _held_in_file(read_safetensors_header(path)[0])
        except ValueError:
            return "a file that is not a .safetensors file"
    try:
        entries = sorted(path.iterdir())
    except OSError as err:
        return f"nothing readable ({err.strerror or err})"
    if not entries:
        return "nothing (an empty folder)"
    index = _json_or_none(path / "model_index.json")
    if index is not None:
        return f"a diffusers model ({index.get('_class_name', 'model_index.json')})"
    config = _json_or_none(path / "config.json")
    if config is not None:
        kind = config.get("_class_name") or (config.get("architectures") or [None])[0]
        return f"a {kind} (its config.json)" if kind else "a config.json that names no model class"
    images = sum(1 for p in entries if p.suffix.lower() in IMAGE_SUFFIXES)
    if images:
        return f"{images} image(s)"
    shown = ", ".join(p.name for p in entries[:3]) + (", ..." if len(entries) > 3 else "")
    folders = [p for p in entries if p.is_dir()]
    if any(_has_images(folder) for folder in folders[:20]):
        return f"folders of images ({shown}), like a dataset"
    return f"{len(folders)} folder(s) and {len(entries) - len(folders)} file(s) ({shown}) but no config.json"


def _held_in_file(shapes: Mapping[str, tuple[int, ...]]) -> str:
    part = next((component for component in COMPONENTS.values() if component.found_in(shapes)), None)
    if part is COMPONENTS["ae"]:
        return autoencoder_held(shapes)
    if part is not None:
        return part.what.split(" (")[0]
    try:
        rules = checkpoint_rules(shapes, "it")
    except ModelLoadError:
        keys = CheckpointKeys(dict(shapes), "it")
        return "a model that is not trained here" if keys.has(UNET_PREFIX) else not_a_unet(keys)
    return f"a model of the {rules.title} family" if rules is not None else "a UNet of unknown width"


def _has_images(folder: Path) -> bool:
    try:
        return any(p.suffix.lower() in IMAGE_SUFFIXES for p in folder.iterdir())
    except OSError:
        return False


def _json_or_none(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None
