"""What ComfyUI's Wan split files hold, told from their tensor names alone (torch-free): which Wan model a
diffusion_models file is (wan_file_kind), which layout an autoencoder or a CLIP image encoder file is in, and what a
family's files beside its model file lack or hold instead (the families' checkpoint_issues)."""
from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from trainers.core.errors import ConfigIssue
from trainers.core.fsio import pickle_problem, read_safetensors_header
from trainers.models.flow_rules import Part
from trainers.models.rules import ModelFiles

MODEL = "pretrained_model_name_or_path"
_READER = "trainers.models.wan.single_file"
_UMT5 = Part("t5", "text_encoders.umt5xxl.", "text_encoder", "UMT5-XXL text encoder (ComfyUI's umt5_xxl_fp16.safetensors)",
             tokenizer="google/umt5-xxl", reader=_READER)
_VAE_KEYS = (("encoder.conv1.weight", "encoder.conv_in.weight"),  # Wan-AI's or diffusers'
             ("conv2.weight", "post_quant_conv.weight"))
# ComfyUI's split files beside a Wan diffusion_models file (single_file.py reads them): UMT5-XXL and the autoencoder,
# each in a file of its own; UMT5's tokenizer is google/umt5-xxl's (WanPipeline's, musubi-tuner's)
SPLIT_PARTS = (_UMT5, Part("vae", "vae.", "ae", "autoencoder (ComfyUI's wan_2.1_vae.safetensors)", reader=_READER,
                           denoiser_input=("patch_embedding.weight", 1), file_keys=_VAE_KEYS))
# the image-to-video models' inputs are the latents, a mask and the first frame's latents (16 + 4 + 16): 16 channels
I2V_PARTS = (_UMT5, Part("vae", "vae.", "ae", "autoencoder (ComfyUI's wan_2.1_vae.safetensors)", reader=_READER,
                         file_keys=_VAE_KEYS))
TI2V_PARTS = (_UMT5, Part("vae", "vae.", "ae", "Wan 2.2 autoencoder in diffusers' layout (vae/diffusion_pytorch_model"
                          ".safetensors of Wan-AI/Wan2.2-TI2V-5B-Diffusers)", reader=_READER, latent_channels=48,
                          denoiser_input=("patch_embedding.weight", 1), file_keys=_VAE_KEYS))


@dataclass(frozen=True)
class SingleFiles:
    """What a Wan family reads as its single files: the kinds of diffusion_models file (wan_file_kind), the parts
    beside them, and the files of its own (dit_high_noise: a pair's second expert; clip: an image encoder)."""

    kinds: frozenset[str]
    example: str  # its file as ComfyUI names it, for messages
    parts: tuple[Part, ...] = SPLIT_PARTS
    pair: bool = False  # dit_high_noise, the high-noise expert, beside the low-noise one
    clip: bool = False  # clip, the CLIP image encoder
    vae22: bool = False  # Wan 2.2's 48-channel autoencoder (read in diffusers' layout only)


# each Wan family's single files, by its own kind (its rules' single_file_kind)
SINGLE_FILES = {
    "t2v": SingleFiles(frozenset({"t2v"}), "wan2.1_t2v_1.3B_fp16.safetensors"),
    "i2v": SingleFiles(frozenset({"i2v"}), "wan2.1_i2v_480p_14B_fp16.safetensors", I2V_PARTS, clip=True),
    "a14b_i2v": SingleFiles(frozenset({"t2v", "a14b_i2v"}), "wan2.2_t2v_low_noise_14B_fp16.safetensors with "
                            "dit_high_noise = wan2.2_t2v_high_noise_14B_fp16.safetensors", I2V_PARTS, pair=True),
    "ti2v": SingleFiles(frozenset({"ti2v"}), "wan2.2_ti2v_5B_fp16.safetensors", TI2V_PARTS, vae22=True),
}
# what each kind of Wan reference-layout file (wan_file_kind) is, for messages
FILE_KINDS = {"t2v": "a text-to-video Wan model's file (16 input channels: Wan 2.1 T2V, or a Wan 2.2 T2V A14B expert)",
              "i2v": "Wan 2.1 I2V's file (36 input channels and an image projection)",
              "a14b_i2v": "a Wan 2.2 I2V A14B expert's file (36 input channels, no image projection)",
              "ti2v": "Wan 2.2 TI2V 5B's file (48 input channels)",
              "flf2v": "Wan 2.1's first-last-frame model's file (an image projection with a position embedding)",
              "vace": "a Wan VACE model's file", "animate": "a Wan Animate model's file",
              "other": "a Wan model of another kind's file"}
# the CLIP image encoder file layouts the `clip` option reads (clip_layout)
CLIP_LAYOUTS = {"transformers": "vision_model.embeddings.class_embedding",  # clip_vision_h, a folder's image_encoder
                "open_clip": "visual.transformer.resblocks.",  # OpenCLIP's ViT-H/14 (ComfyUI reads it too)
                "wan": "visual.transformer.0.attn.to_qkv."}  # Wan-AI's models_clip_*.pth (musubi-tuner's --clip)


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
    """An autoencoder file's layout: "wan21" or "wan22" (Wan-AI's names: wan_2.1_vae, wan2.2_vae, whose stages nest
    their blocks), "diffusers" (AutoencoderKLWan's own), "" (neither)."""
    names = set(names)
    if "encoder.conv1.weight" in names:
        nested = any(re.match(r"encoder\.downsamples\.\d+\.downsamples\.", k) for k in names)
        return "wan22" if nested else "wan21"
    return "diffusers" if "encoder.conv_in.weight" in names and "post_quant_conv.weight" in names else ""


def clip_layout(names: Iterable[str]) -> str:
    """A CLIP image encoder file's layout (a CLIP_LAYOUTS key), "" when it is none of them. Each may come without
    its top level (`vision_model.`: transformers 5 saves none; `visual.`)."""
    names = list(names)
    return next((layout for layout, marker in CLIP_LAYOUTS.items()
                 if any(k.startswith((marker, marker.split(".", 1)[1])) for k in names)), "")


def _header(path: Path) -> dict[str, tuple[int, ...]] | None:
    """The tensor shapes of a .safetensors file; None when it is none (the component checks name a damaged one)."""
    try:
        return read_safetensors_header(path)[0]
    except (OSError, ValueError):
        return None


def given(text: str) -> Path | None:
    return Path(text).expanduser() if text.strip() else None


def pair_issues(keys_name: str, shapes: Mapping[str, tuple[int, ...]], high_noise: str) -> list[ConfigIssue]:
    """The high-noise expert's file of a Wan 2.2 A14B pair (dit_high_noise, musubi-tuner's name) beside the low-noise
    one (the model file, musubi-tuner's dit): given, a Wan file of the same kind and sizes, not scaled fp8."""
    model, kind = Path(keys_name).name, wan_file_kind(shapes)
    example = "wan2.2_i2v_high_noise_14B_fp16.safetensors" if kind == "a14b_i2v" else \
        "wan2.2_t2v_high_noise_14B_fp16.safetensors"
    path = given(high_noise)
    if path is None:
        return [ConfigIssue("dit_high_noise", f"{model} is one expert of a Wan 2.2 A14B pair (musubi-tuner's dit: "
                            f"the low-noise one): set dit_high_noise to the high-noise expert's file ({example})",
                            "model")]
    if not path.is_file():
        return []  # the option's own path check names it
    theirs = _header(path) if path.suffix.lower() == ".safetensors" else None
    if theirs is None:
        return [ConfigIssue("dit_high_noise", f"{path.name} is not a .safetensors file: give the high-noise "
                            f"expert's diffusion_models file ({example})", "model")]
    ours = _reference(shapes)
    high = _reference(theirs)
    if scaled_fp8(high):
        return [ConfigIssue("dit_high_noise", f"{path.name} stores the expert as scaled fp8 (ComfyUI's *_fp8_scaled "
                            "files), which is not read here: use its fp16 file and set fp8_base to train in fp8",
                            "model")]
    if "patch_embedding.weight" not in high:
        return [ConfigIssue("dit_high_noise", f"{path.name} is not a Wan diffusion_models file (no patch_embedding): "
                            f"give the high-noise expert's ({example})", "model")]
    if wan_file_kind(high) != kind:
        return [ConfigIssue("dit_high_noise", f"{path.name} is {FILE_KINDS[wan_file_kind(high)]}, but {model} is "
                            f"{FILE_KINDS[kind]}: give the two experts of one Wan 2.2 pair ({example})", "model")]
    if high != ours:
        return [ConfigIssue("dit_high_noise", f"{path.name} has other sizes than {model} (the experts of a Wan 2.2 "
                            f"pair have the same): give the high-noise expert of the same pair ({example})", "model")]
    return []


def _reference(shapes: Mapping[str, tuple[int, ...]]) -> dict[str, tuple[int, ...]]:
    """A diffusion_models file's shapes without ComfyUI's `model.diffusion_model.` nesting."""
    prefix = next((p for p in ("model.diffusion_model.", "diffusion_model.") if f"{p}patch_embedding.weight" in shapes),
                  "")
    return {k[len(prefix):]: tuple(v) for k, v in shapes.items() if k.startswith(prefix)}


def high_noise_unread(high_noise: str, title: str, reason: str) -> list[ConfigIssue]:
    """dit_high_noise set where it is not read (`reason`: what to do instead)."""
    if not high_noise.strip():
        return []
    return [ConfigIssue("dit_high_noise", f"is not read with {title} models: {reason}", "model")]


def clip_issues(keys_name: str, clip: str) -> list[ConfigIssue]:
    """Wan 2.1 I2V's CLIP image encoder beside its model file (the `clip` option, musubi-tuner's --clip)."""
    path = given(clip)
    if path is None:
        return [ConfigIssue("clip", f"{Path(keys_name).name} holds the Wan 2.1 I2V denoiser but not its CLIP image "
                            "encoder: set clip to ComfyUI's clip_vision/clip_vision_h.safetensors (or Wan-AI's "
                            "models_clip_open-clip-xlm-roberta-large-vit-huge-14.pth, musubi-tuner's --clip)",
                            "model")]
    if not path.is_file():
        return []  # the option's own path check names it
    if path.suffix.lower() != ".safetensors":
        problem = pickle_problem(path)
        return [ConfigIssue("clip", problem, "model")] if problem else []
    names = _header(path)
    if names is None or clip_layout(names):
        return []  # a damaged file: named when it loads
    return [ConfigIssue("clip", f"{path.name} holds no CLIP vision encoder (vision_model.encoder.layers..., OpenCLIP's "
                        "visual.transformer.resblocks... or Wan-AI's visual.transformer...): give ComfyUI's "
                        "clip_vision_h.safetensors", "model")]


def clip_unread(clip: str, title: str) -> list[ConfigIssue]:
    if not clip.strip():
        return []
    return [ConfigIssue("clip", f"is not read with {title} models (only Wan 2.1 I2V's single files take a CLIP image "
                        "encoder file): leave it empty", "model")]


def vae22_issues(ae: str) -> list[ConfigIssue]:
    """Wan 2.2's 48-channel autoencoder in Wan-AI's layout (ComfyUI's vae/wan2.2_vae.safetensors), which diffusers'
    convert_wan_vae_to_diffusers does not read (it takes Wan 2.1's structure): named, with the file that is read."""
    path = given(ae)
    names = _header(path) if path is not None and path.is_file() and path.suffix.lower() == ".safetensors" else None
    if names is None or vae_layout(names) != "wan22":
        return []
    return [ConfigIssue("ae", f"{path.name} is Wan 2.2's autoencoder in Wan-AI's layout (ComfyUI's wan2.2_vae), "
                        "which diffusers' convert_wan_vae_to_diffusers does not read: give the diffusers VAE's file "
                        "instead, vae/diffusion_pytorch_model.safetensors of Wan-AI/Wan2.2-TI2V-5B-Diffusers", "model")]


def own_file_issues(spec: SingleFiles, title: str, name: str, shapes: Mapping[str, tuple[int, ...]],
                    files: ModelFiles) -> list[ConfigIssue]:
    """The files of a Wan family's own beside its model file: needed where it reads them, refused where not."""
    issues = pair_issues(name, shapes, files.dit_high_noise) if spec.pair else high_noise_unread(
        files.dit_high_noise, title, "a Wan 2.2 A14B pair trains as model_family = 'wan22' (set it: a T2V expert's file "
        "has Wan 2.1 T2V 14B's layout)" if "t2v" in spec.kinds else "it has one transformer: leave it empty")
    issues += clip_issues(name, files.clip) if spec.clip else clip_unread(files.clip, title)
    return issues + (vae22_issues(files.ae) if spec.vae22 else [])


def folder_file_issues(files: ModelFiles, title: str) -> list[ConfigIssue]:
    """dit_high_noise and clip set with a diffusers folder, which holds its own."""
    return [ConfigIssue(option, f"is read with a diffusion_models file only: a {title} diffusers folder holds its own "
                        "(leave it empty)", "model") for option in ("dit_high_noise", "clip") if getattr(files, option)]
