"""Which model family a LoRA file is for, told from its metadata (what sd-scripts and Atelier write) or else from its
key names; and which key format it uses. No family is named here: each family's own values are compared."""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from torch import Tensor

from trainers.loras.lora_state import LoraFile
from trainers.models.base import ModelFamily
from trainers.models.families import all_families
from trainers.models.rules import read_json

SGM_NAMES = ("lora_unet_input_blocks_", "lora_unet_middle_block_", "lora_unet_output_blocks_", "lora_unet_time_embed_",
             "lora_unet_label_emb_", "lora_unet_out_")
DIFFUSERS_NAMES = ("lora_unet_down_blocks_", "lora_unet_mid_block_", "lora_unet_up_blocks_", "lora_unet_conv_",
                   "lora_unet_time_embedding_")
FORMAT_PREFIXES = {  # key format -> how its module names start
    "kohya": ("lora_unet_", "lora_te_", "lora_te1_", "lora_te2_", "lora_te3_"),
    "diffusers": ("unet.", "transformer.", "text_encoder.", "text_encoder_2.", "text_encoder_3."),
    "comfyui": ("diffusion_model.", "text_encoders."),
}


def key_format(modules: Iterable[str]) -> str:
    """kohya, diffusers, comfyui, mixed (several) or other (none of these: OneTrainer's, SimpleTuner's, ...)."""
    found = {fmt for name in modules for fmt, prefixes in FORMAT_PREFIXES.items() if name.startswith(prefixes)}
    if len(found) == 1:
        return found.pop()
    return "mixed" if found else "other"


def key_style(modules: Iterable[str]) -> str | None:
    """How kohya names the UNet modules: sgm, diffusers, own (a family's reference names), None (no UNet module)."""
    unet = [name for name in modules if name.startswith("lora_unet_")]
    if not unet:
        return None
    if any(name.startswith(SGM_NAMES) for name in unet):
        return "sgm"
    if any(name.startswith(DIFFUSERS_NAMES) for name in unet):
        return "diffusers"
    return "own"


@dataclass(frozen=True)
class FamilyGuess:
    families: tuple[ModelFamily, ...]  # one when told; several when the names fit more than one
    how: str  # what told it, for the report

    @property
    def found(self) -> ModelFamily | None:
        return self.families[0] if len(self.families) == 1 else None

    def text(self) -> str:
        if not self.families:
            return f"unknown ({self.how})"
        return " or ".join(f.title for f in self.families) + f" ({self.how})"


def _from_metadata(metadata: dict[str, str]) -> FamilyGuess | None:
    """ss_base_model_version, else modelspec.architecture, else ss_network_module (which several families share: all
    of them), each compared with every family before the next is read."""
    version = metadata.get("ss_base_model_version", "").strip()
    architecture = metadata.get("modelspec.architecture", "").strip().removesuffix("/lora")
    module = metadata.get("ss_network_module", "").strip()
    families = all_families()
    for family in families:
        if version and version == family.base_model_version:
            return FamilyGuess((family,), f"its metadata: ss_base_model_version = {version}")
    for family in families:
        if architecture and architecture in (family.architecture_for(False), family.architecture_for(True)):
            return FamilyGuess((family,), f"its metadata: modelspec.architecture = {architecture}")
    told = tuple(f for f in families if module and module == f.lora_metadata(False).get("ss_network_module"))
    return FamilyGuess(told, f"its metadata: ss_network_module = {module}") if told else None


@dataclass(frozen=True)
class FileNaming:
    """A LoRA file in its family's own naming (ModelFamily.lora_file), not kohya's."""

    family: ModelFamily
    paths: dict[str, str]  # kohya module name -> the module's path in the file

    def text(self) -> str:
        return f"{self.family.title}'s LoRA file names ({self.family.lora_file_naming})"

    def write(self, tensors: dict[str, Tensor]) -> dict[str, Tensor]:
        """Tensors in kohya's names (of modules the file named) in the family's naming again."""
        return self.family.lora_file_at_paths(tensors, self.paths)


def file_naming(lora: LoraFile) -> FileNaming | None:
    """The family whose LoRA file naming the file's keys are in: the one its metadata names, else any (those its
    metadata leaves possible first)."""
    told = _from_metadata(lora.metadata)
    families = list(told.families) if told and len(told.families) == 1 else [*(told.families if told else ()),
                                                                              *all_families()]
    for family in dict.fromkeys(families):
        paths = family.lora_file_paths(lora.tensors)
        if paths:
            return FileNaming(family, paths)
    return None


def _number(text: str | None) -> float | None:
    try:
        return float(text) if text else None
    except ValueError:
        return None


def kohya_named(lora: LoraFile) -> tuple[LoraFile, FileNaming | None]:
    """The file in kohya's names (as the tools work on it) and its family's naming, None when it has kohya's (or
    another tool's) names already. A module saved with its alpha folded into lora_A gets the file's
    ss_network_alpha back, as network_weights reads it: the same change."""
    naming = file_naming(lora)
    if naming is None:
        return lora, None
    state = naming.family.lora_in_own_names(dict(lora.tensors), _number(lora.metadata.get("ss_network_alpha")))
    return LoraFile(lora.path, state, lora.metadata), naming


def _cross_attention_width(lora: LoraFile) -> int | None:
    """The text width the UNet's cross-attention reads (an attn2 to_k module's input), None without one."""
    for name, parts in lora.modules.items():
        down = parts.get("lora_down.weight")
        if name.startswith("lora_unet_") and name.endswith("attn2_to_k") and down is not None:
            return int(down.shape[1])
    return None


def _published_width(family: ModelFamily) -> int | None:
    config = Path(family.arch_dir) / "unet" / "config.json"
    return read_json(config).get("cross_attention_dim") if config.exists() else None


def guess_family(lora: LoraFile) -> FamilyGuess:
    """The family a LoRA is for: its metadata, else the family whose LoRA file naming its keys are in, else the
    families naming their UNet modules its way (narrowed by the
    cross-attention width when the family's published architecture tells)."""
    told = _from_metadata(lora.metadata)
    if told is not None and len(told.families) == 1:
        return told
    naming = file_naming(lora)
    if naming is not None:
        return FamilyGuess((naming.family,), "its key names: its LoRA files' naming")
    if told is not None:
        return told
    style = key_style(lora.modules)
    if style is None:
        return FamilyGuess((), "no UNet modules and no metadata to tell")
    candidates = tuple(f for f in all_families() if f.unet_key_style == style)
    width = _cross_attention_width(lora)
    narrowed = tuple(f for f in candidates if width is not None and _published_width(f) == width)
    if len(narrowed) == 1:
        return FamilyGuess(narrowed, f"its key names and a cross-attention width of {width}")
    return FamilyGuess(candidates, "its key names")
