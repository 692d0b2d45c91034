"""What a model family is without its weights (torch-free, for Validate in the GUI): how its models are told apart
(diffusers folders by their JSON configs, single files by their tensor names and shapes) and which options it
cannot honour. Each family's `rules` module holds its FamilyRules object; its `family` module's ModelFamily adds
loading and running to it (trainers/models/base.py).
"""
from __future__ import annotations

import copy
import functools
import importlib
import json
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TypeVar

from trainers.core.errors import BadInput, ConfigIssue
from trainers.core.memory_facts import ModelSize
from trainers.core.options.training import family_declaration, family_sections, in_group
from trainers.core.options.families import family_network_args
from trainers.core.options.groups.network import FUSED_LAYER_ARGS
from trainers.core.registry import FAMILIES, FamilySpec

SINGLE_FILE_SUFFIXES = (".safetensors", ".ckpt", ".pt", ".pth")  # what load_model reads as a single file
UNET_PREFIX = "model.diffusion_model."  # the UNet of an LDM/SGM single file
VAE_PREFIX = "first_stage_model."  # its VAE


class ModelLoadError(BadInput):
    """The model cannot be used: the message says which file and why."""


def read_json(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ModelLoadError(f"{path} is missing: is this a complete diffusers model folder?") from None
    except OSError as err:
        raise ModelLoadError(f"{path} cannot be read ({err.strerror or err})") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ModelLoadError(f"{path} is not valid JSON ({err})") from None


def json_or_empty(path: Path) -> dict[str, Any]:
    """A JSON config's fields; {} when it is missing or unreadable (what only tells a variant apart)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


@dataclass(frozen=True)
class CheckpointKeys:
    """The tensor names and shapes of a single-file checkpoint (no tensor read), for family detection."""

    shapes: dict[str, tuple[int, ...]]
    name: str  # the file, for messages

    def has(self, prefix: str) -> bool:
        return any(k.startswith(prefix) for k in self.shapes)

    def cross_attention_width(self, unet_prefix: str) -> int | None:
        """The UNet's text-embedding width (from an attn2.to_k weight), None when there is none."""
        return next((s[1] for k, s in self.shapes.items()
                     if k.startswith(unet_prefix) and k.endswith("attn2.to_k.weight") and len(s) == 2), None)


@dataclass(frozen=True)
class DistilledBase:
    """A step-distilled ("turbo") variant of a family, told from its files (trainers/models/distilled.py)."""

    variant: str  # e.g. "FLUX.1 schnell"
    told_by: str  # what in its files says so
    adapter: str = ""  # the de-distillation training adapter its authors or peers publish; "": none published
    without: str = ""  # what to do instead where no adapter is published


@dataclass(frozen=True)
class ModelFiles:
    """The separate component files of a run (sd-scripts' option names: SD3 and FLUX from single files that lack
    them; musubi-tuner's text_encoder) and where tokenizers such files lack are kept."""

    clip_l: str = ""
    clip_g: str = ""
    t5xxl: str = ""
    ae: str = ""
    text_encoder: str = ""  # musubi-tuner's name: an LLM text encoder's file (Z-Image)
    byt5: str = ""  # sd-scripts' name: HunyuanImage 2.1's ByT5 glyph encoder's file
    image_encoder: str = ""  # musubi-tuner's name: HunyuanVideo 1.5 I2V's SigLIP file
    dit_high_noise: str = ""  # musubi-tuner's name: a Wan 2.2 A14B pair's high-noise expert (its dit: the low-noise)
    clip: str = ""  # musubi-tuner's name: Wan 2.1 I2V's CLIP image encoder file
    llm_adapter_path: str = ""  # sd-scripts' name: Anima's LLM adapter file, for a DiT file without it
    t5_tokenizer_path: str = ""  # sd-scripts' name: the T5 tokenizer folder of Anima's adapter
    tokenizer_cache_dir: str = ""

    @classmethod
    def from_values(cls, values: Mapping[str, Any]) -> "ModelFiles":
        return cls(**{name: str(values.get(name) or "").strip() for name in cls.__dataclass_fields__})


@dataclass(frozen=True)
class TextEncoderPart:
    """Where one text encoder's weights sit in a single file: its transformers class, diffusers subfolder, prefix."""

    cls: str  # a transformers class name
    subfolder: str
    prefix: str


Rules = TypeVar("Rules", bound="FamilyRules")


def _owners(option: str) -> str:
    """The families that declare `option` as their own (their options.py's OPTIONS), in words; "" for a shared one."""
    from trainers.core.options.families import names
    from trainers.core.options.training import FAMILY_DECLARATIONS

    titles = [t for found in FAMILY_DECLARATIONS if option in {o.name for o in found.options} for t in found.titles]
    return names(titles) if titles else ""


class FamilyRules(ABC):
    """A model generation as far as checks before loading need it."""

    name: str  # model_family value (see trainers/core/registry.py)
    title: str  # for messages
    unet_key_style: str  # "diffusers" or "sgm": how kohya names this family's UNet modules; "own": lora_targets says
    objective: Literal["ddpm", "flow"] = "ddpm"  # noise prediction (train/diffusion.py), flow matching (train/flow.py)
    denoiser_folder: str = "unet"  # the denoiser's subfolder (and model_index.json entry) in a diffusers folder
    supports_clip_skip: bool = True
    detect_priority: int = 0  # when several families claim a model, the highest wins (the most specific)
    arch_dir: Path  # configs of the architecture (diffusers layout, no weights) for single-file checkpoints
    pipeline_class: str  # the diffusers pipeline of a saved model folder
    single_file_text_encoders: tuple[TextEncoderPart, ...]
    network_arg_keys: frozenset[str] = frozenset()  # family-only network_args it reads (FLUX's layer choices)
    # Families whose single files are not in the LDM/SGM layout load them themselves (ModelFamily.load_checkpoint).
    own_checkpoint_layout: bool = False
    checkpoint_parts: tuple[Any, ...] = ()  # the parts (flow_rules.Part) separate files may stand in for
    memory_facts: ModelSize | None = None  # its published sizes, for the memory estimate of a model not here
    # the video layer: a video family trains clips (video_directory datasets, trainers/models/video_data.py), frames
    # 1 + frame_rule x k (its causal 3D VAE's temporal compression), dropped to frame_rate (fps; None: as recorded)
    is_video: bool = False
    frame_rule: int = 1
    frame_rate: float | None = None
    bucket_step: int = 16  # the side step of its video buckets (musubi-tuner's 16; Wan 2.2 TI2V 5B's 16x VAE: 32)
    # its variants' sizes, keyed by the words (lowercase) a hub id of that variant holds, the most specific first
    memory_variants: Mapping[tuple[str, ...], ModelSize] = {}
    # programs with no loader of this family's LoRA files whatever their keys (trainers/tools/loaders.py's names:
    # diffusers without a pipeline of it): the health check and inspect say so instead of predicting from the keys
    lora_loaders_missing: frozenset[str] = frozenset()

    def trained_size(self, values: Mapping[str, Any], size: ModelSize) -> ModelSize:
        """The memory estimate's sizes of a run with these options (a family option that trains more layers: more
        LoRA parameters); as they are here."""
        return size

    @classmethod
    def of(cls: type[Rules], rules: "FamilyRules") -> Rules:
        """The family `rules` describe as an object of `cls`, the plug-in class that adds loading and running."""
        family = copy.copy(rules)
        family.__class__ = cls
        return family

    @abstractmethod
    def claims_folder(self, index: dict[str, Any], unet_config: dict[str, Any], folder: Path) -> bool:
        """Whether a diffusers folder (its model_index.json and unet/config.json) is a model of this family."""

    @abstractmethod
    def claims_checkpoint(self, keys: CheckpointKeys) -> bool:
        """Whether a single-file checkpoint is of this family; raises ModelLoadError for a variant it cannot
        train (e.g. a refiner)."""

    def claims_named_checkpoint(self, keys: CheckpointKeys) -> bool:
        """Whether a single file is this family's when model_family names it, though detection alone gives it to
        another (a layout two families share: a Wan 2.2 A14B expert's and Wan 2.1 T2V 14B's); its checkpoint_issues
        then name what the file lacks or is instead."""
        return False

    def accepts(self, requested: "FamilyRules", single_file: bool) -> bool:
        """Whether a model detected as this family may be trained as `requested` (model_family): families of one
        plug-in class (SD1/SD2) differ only in sizes in a diffusers folder, so there the user is trusted."""
        if requested.name == self.name:
            return True
        return not single_file and type(requested) is type(self) and requested.unet_key_style == self.unet_key_style

    def option_issues(self, values: Mapping[str, Any]) -> list[ConfigIssue]:
        """Options of a config this family cannot honour (checked before its weights load). By default the
        flow-matching options must keep their defaults."""
        issues = [ConfigIssue(o.name, f"applies to {_owners(o.name) or 'SD3 and FLUX'} models only, not to "
                              f"{self.title} models: leave it at {o.default!r}", o.group)
                  for o in in_group("flow") if values.get(o.name, o.default) != o.default]
        if values.get("save_diffusers_lora"):
            issues.append(ConfigIssue("save_diffusers_lora", f"diffusers reads the kohya files of {self.title} LoRAs "
                                      "itself: leave it off", "network"))
        return issues + self.network_arg_issues(values) + self.other_family_issues(values)

    def training_issues(self, trains: str, values: Mapping[str, Any]) -> list[ConfigIssue]:
        """Options this family cannot honour in a run of a method that trains `trains` (the registry's
        MethodSpec.trains: "network", "full", ...); none by default."""
        return []

    def other_family_issues(self, values: Mapping[str, Any]) -> list[ConfigIssue]:
        """Options of another family's own section (its options.py's GROUPS) set to other than their defaults."""
        found = family_declaration(self.name)
        reads = found.reads if found is not None else frozenset()
        return [ConfigIssue(o.name, f"is not read by {self.title} models: leave it at {o.default!r}", o.group)
                for o in family_sections() if o.name not in reads and values.get(o.name, o.default) != o.default]

    def network_arg_issues(self, values: Mapping[str, Any]) -> list[ConfigIssue]:
        """network_args keys of another family's LoRAs."""
        keys = [str(a).split("=")[0].strip() for a in values.get("network_args") or []]
        owners = family_network_args()
        issues = [ConfigIssue("network_args", f"{key} chooses {' and '.join(owners[key])} layers (sd-scripts' "
                              f"network_args for {' and '.join(owners[key])} LoRAs), which {self.title} models do not "
                              "have: leave it out", "network")
                  for key in keys if key in owners and key not in self.network_arg_keys]
        if self.unet_key_style != "own":  # only families naming their own modules have fused q/k/v ones
            issues += [ConfigIssue("network_args", f"{key} splits LoRA modules that cover q, k and v together; an "
                                   f"{self.title} model's LoRA has none: leave it out", "network")
                       for key in keys if key in FUSED_LAYER_ARGS]
        return issues

    def distilled_base(self, path: Path) -> DistilledBase | None:
        """The distilled variant a model folder or single file of this family is, from its files; None when it
        is not one, or its files do not tell."""
        return None

    def tells_distilled(self, path: Path) -> bool:
        """Whether `path`'s files tell a distilled variant from the others (a diffusers folder's configs do; most
        single files do not)."""
        return path.is_dir()

    def checkpoint_issues(self, keys: CheckpointKeys, files: ModelFiles, vae_path: str = "") -> list[ConfigIssue]:
        """What a single file of this family lacks, with no option set to stand in, before it loads. An LDM/SGM
        file must hold its text encoders, and its VAE unless `vae` names one."""
        issues = [ConfigIssue("pretrained_model_name_or_path", f"{Path(keys.name).name} holds the {self.title} UNet "
                              f"but not its text encoder ({part.prefix}*), which a single file must hold here: give "
                              "the complete checkpoint, or the model's diffusers folder", "model")
                  for part in self.single_file_text_encoders if not keys.has(part.prefix)][:1]
        if not vae_path and not keys.has(VAE_PREFIX):
            issues.append(ConfigIssue("vae", f"{Path(keys.name).name} holds no VAE ({VAE_PREFIX}*): set vae to a "
                                      "diffusers AutoencoderKL folder", "model"))
        return issues


def plugins(module_of: Callable[[FamilySpec], str]) -> tuple[Any, ...]:
    """Every family's object in the module `module_of` names (its rules or its family), the most specific first
    (the order detection asks them in)."""
    found = [getattr(importlib.import_module(module_of(spec)), spec.attribute) for spec in FAMILIES]
    return tuple(sorted(found, key=lambda f: -f.detect_priority))


def named(name: str, among: tuple[Any, ...]) -> Any:
    for plugin in among:
        if plugin.name == name:
            return plugin
    raise KeyError(f"unknown model family {name!r}; known: {', '.join(spec.name for spec in FAMILIES)}")


@functools.cache
def all_rules() -> tuple[FamilyRules, ...]:
    return plugins(lambda spec: spec.rules)


def rules_of(name: str) -> FamilyRules:
    return named(name, all_rules())


def folder_rules(folder: Path) -> FamilyRules:
    """The family of a diffusers folder, from its pipeline class and UNet config (the most specific claim wins)."""
    index = read_json(folder / "model_index.json") if (folder / "model_index.json").exists() else {}
    # A pipeline whose denoiser is a transformer lists no unet (and has no unet/ folder).
    unet_cfg = read_json(folder / "unet" / "config.json") if "unet" in index or not index else {}
    for candidate in all_rules():
        if candidate.claims_folder(index, unet_cfg, folder):
            return candidate
    pipeline, cross_dim = str(index.get("_class_name", "")), unet_cfg.get("cross_attention_dim")
    found = f"pipeline class {pipeline!r}" if pipeline else f"a UNet with cross_attention_dim={cross_dim!r}"
    known = ", ".join(f.title for f in reversed(all_rules()))
    raise ModelLoadError(
        f"pretrained_model_name_or_path: cannot tell the model family of {folder}: found {found}. "
        f"Supported: {known} diffusers folders. If it is one of these, set model_family.")


def checkpoint_rules(shapes: Mapping[str, tuple[int, ...]], name: str,
                     requested: FamilyRules | None = None) -> FamilyRules | None:
    """The family of a single file from its tensor names (and a shape or two), None when only the UNet is there
    and its width is unknown; raises ModelLoadError for files that are no model to train (naming the `requested`
    family, model_family, when one is set)."""
    keys = CheckpointKeys(dict(shapes), name)
    if _is_lora(keys):
        raise ModelLoadError(f"{name} is a LoRA, not a full model: give the base model it was trained on, "
                             "and load the LoRA as network_weights")
    if requested is not None and requested.claims_named_checkpoint(keys):
        return requested
    for candidate in all_rules():  # a family's own layout (SD3's and FLUX's reference code): it loads those
        if candidate.own_checkpoint_layout and candidate.claims_checkpoint(keys):
            return candidate
    if not keys.has(UNET_PREFIX):
        what = not_a_unet(keys)
        fix = "; give the whole diffusers folder" if what.startswith("one component") else ""
        if requested is not None and requested.own_checkpoint_layout:
            keys_of = getattr(requested, "reference_prefixes", ())
            named = f" ({', '.join(keys_of[:1])}...)" if keys_of else ""
            raise ModelLoadError(f"{name} has none of the tensors of {requested.title} single files{named} "
                                 f"(model_family = {requested.name!r}): it looks like {what}{fix}")
        raise ModelLoadError(f"{name} has no UNet weights ({UNET_PREFIX}*): it looks like {what}{fix}")
    conv_in = shapes.get(UNET_PREFIX + "input_blocks.0.0.weight")
    if conv_in is not None and len(conv_in) == 4 and conv_in[1] != 4:
        raise ModelLoadError(f"{name} has a UNet with {conv_in[1]} input channels (an inpainting, depth or "
                             "instruct model); only text-to-image checkpoints (4 channels) are supported")
    return next((f for f in all_rules() if f.claims_checkpoint(keys)), None)


# the first modules of diffusers' transformers (FLUX.1's and Krea 2's transformer_blocks, Lumina 2's time_caption_embed)
_DIFFUSERS_DENOISERS = ("transformer_blocks.", "single_transformer_blocks.", "time_caption_embed.")


def _is_lora(keys: CheckpointKeys) -> bool:
    return keys.has("lora_unet_") or keys.has("lora_te") or any(".lora_down." in k or ".lora_A." in k
                                                                 for k in keys.shapes)


def not_a_unet(keys: CheckpointKeys) -> str:
    """What a single file without an LDM/SGM UNet holds, in a few words."""
    if _is_lora(keys):
        return "a LoRA"
    if keys.has("encoder.down.") or keys.has("encoder.down_blocks.") or keys.has(VAE_PREFIX):
        return "a VAE on its own"
    if keys.has("down_blocks.") or keys.has("text_model.") or keys.has("encoder.layers."):
        return "one component of a diffusers model"
    if any(keys.has(p) for p in _DIFFUSERS_DENOISERS):
        return "one component of a diffusers model (its transformer, in diffusers' names)"
    return "a file of no model family Atelier trains"


def unknown_checkpoint(name: str) -> ModelLoadError:
    """The error of a single file whose family cannot be told (checkpoint_rules gave None)."""
    titles = ", ".join(f.title for f in reversed(all_rules()))
    return ModelLoadError(f"{name}: cannot tell the model family (it has no text encoder weights, and its UNet's "
                          f"cross-attention width is none of {titles}'s); set model_family")
