"""What ComfyUI's Wan split files hold, told from their tensor names alone (torch-free): which Wan model a
diffusion_models file is (wan_file_kind), which layout an autoencoder file is in, what each Wan family reads
(SingleFiles, declared in its rules.py) and the options of other families' files set where they are not read."""
from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from trainers.core.errors import ConfigIssue
from trainers.core.fsio import read_safetensors_header
from trainers.models.flow_rules import Part
from trainers.models.rules import ModelFiles

READER = "trainers.models.wan.single_file"
UMT5_PART = Part("t5", "text_encoders.umt5xxl.", "text_encoder",
                 "UMT5-XXL text encoder (ComfyUI's umt5_xxl_fp16.safetensors)", tokenizer="google/umt5-xxl",
                 reader=READER)
VAE_KEYS = (("encoder.conv1.weight", "encoder.conv_in.weight"),  # Wan-AI's or diffusers'
             ("conv2.weight", "post_quant_conv.weight"))
# ComfyUI's split files beside a Wan diffusion_models file (single_file.py reads them): UMT5-XXL and the autoencoder,
# each in a file of its own; UMT5's tokenizer is google/umt5-xxl's (WanPipeline's, musubi-tuner's)
SPLIT_PARTS = (UMT5_PART, Part("vae", "vae.", "ae", "autoencoder (ComfyUI's wan_2.1_vae.safetensors)", reader=READER,
                           denoiser_input=("patch_embedding.weight", 1), file_keys=VAE_KEYS))
# the image-to-video models' inputs are the latents, a mask and the first frame's latents (16 + 4 + 16): 16 channels
I2V_PARTS = (UMT5_PART, Part("vae", "vae.", "ae", "autoencoder (ComfyUI's wan_2.1_vae.safetensors)", reader=READER,
                         file_keys=VAE_KEYS))


@dataclass(frozen=True)
class SingleFiles:
    """What a Wan family reads as its single files: the kinds of diffusion_models file (wan_file_kind) and what each
    is (for messages), the parts beside them, and the options naming files of its own (its rules' own_file_issues
    check them; each Wan family's rules.py declares its SingleFiles)."""

    kinds: Mapping[str, str]  # kind -> what such a file is ("": another family's, which says it)
    example: str  # its file as ComfyUI names it, for messages
    parts: tuple[Part, ...] = SPLIT_PARTS
    own_files: tuple[str, ...] = ()  # options of files read beside the model file, e.g. a second expert


OWN_FILE_OPTIONS = ("dit_high_noise", "clip")  # the options of files a Wan family reads beside its model file
T2V_FILES = SingleFiles({"t2v": "a text-to-video Wan model's file (16 input channels, Wan 2.1 T2V's layout)"},
                        "wan2.1_t2v_1.3B_fp16.safetensors")
# the kinds of Wan reference-layout file (wan_file_kind) no Wan family reads, for messages
UNREAD_KINDS = {"flf2v": "Wan 2.1's first-last-frame model's file (an image projection with a position embedding)",
                "vace": "a Wan VACE model's file", "animate": "a Wan Animate model's file",
                "other": "a Wan model of another kind's file"}


def describe_kind(kind: str) -> str:
    """What a Wan file of `kind` is, as the Wan family reading it says (or UNREAD_KINDS)."""
    from trainers.models.rules import all_rules

    for rules in all_rules():
        described = getattr(getattr(rules, "single_files", None), "kinds", {}).get(kind)
        if described:
            return described
    return UNREAD_KINDS.get(kind, UNREAD_KINDS["other"])


def scaled_fp8(names: Iterable[str]) -> bool:
    """ComfyUI's *_fp8_scaled files: a `scaled_fp8` marker and a scale beside each weight, read by ComfyUI only."""
    return any(k == "scaled_fp8" or k.endswith((".scaled_fp8", ".scale_weight")) for k in names)


def wan_file_kind(shapes: Mapping[str, tuple[int, ...]]) -> str:
    """What a Wan reference-layout file holds, told by its input channels (16: text-to-video, 36: image-to-video,
    48: TI2V 5B) and its own modules (the image projection of Wan 2.1 I2V, its position embedding in the FLF2V
    model, VACE's, Animate's). A Wan 2.2 T2V A14B expert's file has Wan 2.1 T2V 14B's layout: "t2v" too."""
    if any(k.startswith("vace_blocks.") or ".vace_blocks." in k for k in shapes):
        return "vace"
    if any("motion_encoder." in k for k in shapes):
        return "animate"
    if any(k.endswith("img_emb.emb_pos") for k in shapes):
        return "flf2v"
    patch = next((v for k, v in shapes.items() if k.endswith("patch_embedding.weight")), ())
    channels = patch[1] if len(patch) > 1 else 0
    image = any("img_emb." in k for k in shapes)
    return {16: "t2v", 36: "i2v" if image else "a14b_i2v", 48: "ti2v"}.get(channels, "other")


def vae_layout(names: Iterable[str]) -> str:
    """An autoencoder file's layout: "wan21" or "nested" (Wan-AI's names: wan_2.1_vae, or wan2.2_vae whose stages
    nest their blocks), "diffusers" (AutoencoderKLWan's own), "" (neither)."""
    names = set(names)
    if "encoder.conv1.weight" in names:
        nested = any(re.match(r"encoder\.downsamples\.\d+\.downsamples\.", k) for k in names)
        return "nested" if nested else "wan21"
    return "diffusers" if "encoder.conv_in.weight" in names and "post_quant_conv.weight" in names else ""


def safetensors_shapes(path: Path) -> dict[str, tuple[int, ...]] | None:
    """The tensor shapes of a .safetensors file; None when it is none (the component checks name a damaged one)."""
    try:
        return read_safetensors_header(path)[0]
    except (OSError, ValueError):
        return None


def given(text: str) -> Path | None:
    return Path(text).expanduser() if text.strip() else None


def reference_shapes(shapes: Mapping[str, tuple[int, ...]]) -> dict[str, tuple[int, ...]]:
    """A diffusion_models file's shapes without ComfyUI's `model.diffusion_model.` nesting."""
    prefix = next((p for p in ("model.diffusion_model.", "diffusion_model.") if f"{p}patch_embedding.weight" in shapes),
                  "")
    return {k[len(prefix):]: tuple(v) for k, v in shapes.items() if k.startswith(prefix)}


def unread_file_issues(files: ModelFiles, title: str, own: tuple[str, ...]) -> list[ConfigIssue]:
    """The options of other Wan families' own files (OWN_FILE_OPTIONS) set where they are not read, each named with
    the family that reads it."""
    from trainers.models.rules import all_rules

    issues = []
    for option in OWN_FILE_OPTIONS:
        if option in own or not str(getattr(files, option) or "").strip():
            continue
        readers = [r for r in all_rules() if option in getattr(getattr(r, "single_files", None), "own_files", ())]
        where = " or ".join(f"{r.title}'s (model_family = '{r.name}')" for r in readers) or "another family's"
        issues.append(ConfigIssue(option, f"is not read with {title} models: it names a file of {where} single "
                                  "files; set model_family for those, or leave it empty", "model"))
    return issues


def folder_file_issues(files: ModelFiles, title: str) -> list[ConfigIssue]:
    """The options of a Wan family's own files (OWN_FILE_OPTIONS) set with a diffusers folder, which holds its own."""
    return [ConfigIssue(option, f"is read with a diffusion_models file only: a {title} diffusers folder holds its own "
                        "(leave it empty)", "model") for option in OWN_FILE_OPTIONS if getattr(files, option)]
