"""Single-file checkpoints (.safetensors / .ckpt in the original LDM/SGM layout): load them offline, save them.

Loading: the family is told from the file's key names alone (a safetensors header, or a `.ckpt`
opened lazily with `mmap`); the diffusers components are built from the architecture configs
that ship in `arch/` (no hub access) and filled through diffusers' own LDM->diffusers converters.
Tokenizers come from CLIP's BPE vocabulary, vendored in `arch/` (a real single file has none).

Saving: `save_full_model` writes a diffusers folder and/or one `.safetensors` file in the
original layout (convert.py) that A1111, Forge and ComfyUI load.
"""
from __future__ import annotations

import contextlib
import functools
import gzip
import json
import os
import pickle
import re
import shutil
import struct
import tempfile
import time
import zipfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import torch
from torch import nn

from trainers.core.fsio import atomic_path, current_umask
from trainers.models.base import LoadedModel, ModelFamily, ModelLoadError, read_json, training_scheduler
from trainers.models.convert import (
    SD1_TE_PREFIX,
    SD2_TE_PREFIX,
    SDXL_TE1_PREFIX,
    SDXL_TE2_PREFIX,
    UNET_PREFIX,
    VAE_PREFIX,
    clip_to_ldm,
    openclip_to_ldm,
    unet_to_ldm,
    vae_to_ldm,
)
from trainers.models.sd.family import SD1, SD2
from trainers.models.sdxl.family import SDXL

ARCH_DIR = Path(__file__).with_name("arch")
BPE_FILE = ARCH_DIR / "bpe_simple_vocab_16e6.txt.gz"
ARCH_FOLDERS = {"sd1": "sd15", "sd2": "sd2_768v", "sdxl": "sdxl"}
SINGLE_FILE_SUFFIXES = (".safetensors", ".ckpt", ".pt", ".pth")  # what load_model reads as a single file
_FAMILIES: dict[str, ModelFamily] = {f.name: f for f in (SD1, SD2, SDXL)}
_SPECIAL = ("<|startoftext|>", "<|endoftext|>")


def is_single_file(path: str | os.PathLike) -> bool:
    return Path(path).suffix.lower() in SINGLE_FILE_SUFFIXES


# ----------------------------------------------------------------------------------------------
# CLIP tokenizer from the vendored BPE file


@functools.lru_cache(maxsize=1)
def clip_vocabulary() -> tuple[dict[str, int], tuple[tuple[str, str], ...]]:
    """CLIP's vocabulary and merges, ordered exactly as CLIP's SimpleTokenizer orders them.

    256 byte symbols, the same with `</w>`, one token per merge, then <|startoftext|> (49406)
    and <|endoftext|> (49407): 49408 tokens.
    """
    from trainers.models.tiny import _bytes_to_unicode

    lines = gzip.decompress(BPE_FILE.read_bytes()).decode("utf-8").split("\n")
    merges = tuple(tuple(line.split()) for line in lines[1:49152 - 256 - 2 + 1])
    symbols = _bytes_to_unicode()
    tokens = symbols + [s + "</w>" for s in symbols] + ["".join(m) for m in merges] + list(_SPECIAL)
    vocab = {token: i for i, token in enumerate(tokens)}
    if len(vocab) != 49408 or vocab[_SPECIAL[1]] != 49407:
        raise ModelLoadError(f"{BPE_FILE} is not CLIP's BPE vocabulary ({len(vocab)} tokens)")
    return vocab, merges  # type: ignore[return-value]


def clip_tokenizer(pad_token: str = "<|endoftext|>", model_max_length: int = 77) -> Any:
    """The CLIP ViT-L / OpenCLIP tokenizer (they share one vocabulary), built offline.

    SD1.x and SDXL's first tokenizer pad with <|endoftext|>; OpenCLIP (SD2.x, SDXL's second) with "!" (id 0).
    """
    from transformers import CLIPTokenizer

    vocab, merges = clip_vocabulary()
    return CLIPTokenizer(vocab=dict(vocab), merges=list(merges), pad_token=pad_token,
                         model_max_length=model_max_length)


def _tokenizer(folder: Path, subfolder: str) -> Any:
    """The folder's own tokenizer when it has its files (a diffusers folder), else one from the vendored BPE."""
    from transformers import CLIPTokenizer

    sub = folder / subfolder
    if (sub / "vocab.json").exists() or (sub / "tokenizer.json").exists():
        return CLIPTokenizer.from_pretrained(sub)
    cfg = read_json(sub / "tokenizer_config.json")
    return clip_tokenizer(cfg.get("pad_token", _SPECIAL[1]), cfg.get("model_max_length", 77))


# ----------------------------------------------------------------------------------------------
# Reading a checkpoint: header first, tensors when needed


@dataclass
class Checkpoint:
    path: Path
    shapes: dict[str, tuple[int, ...]]  # every tensor's name and shape, read without loading it
    metadata: dict[str, str] = field(default_factory=dict)  # safetensors __metadata__
    global_step: int | None = None  # .ckpt only
    _tensors: Callable[[], Mapping[str, torch.Tensor]] | None = None

    def tensors(self) -> Mapping[str, torch.Tensor]:
        assert self._tensors is not None
        return self._tensors()


def _safetensors_header(path: Path) -> tuple[dict[str, tuple[int, ...]], dict[str, str]]:
    size = path.stat().st_size
    with open(path, "rb") as fh:
        raw = fh.read(8)
        (length,) = struct.unpack("<Q", raw) if len(raw) == 8 else (0,)
        if not 2 <= length <= min(size - 8, 100_000_000):
            raise ModelLoadError(f"{path} is not a safetensors file (its header is unreadable)")
        try:
            header = json.loads(fh.read(length))
        except (UnicodeDecodeError, json.JSONDecodeError):
            raise ModelLoadError(f"{path} is not a safetensors file (its header is not JSON)") from None
    metadata = header.pop("__metadata__", None) or {}
    return {k: tuple(v["shape"]) for k, v in header.items()}, metadata


def _load_ckpt(path: Path) -> tuple[Mapping[str, torch.Tensor], int | None]:
    try:
        obj = torch.load(path, map_location="cpu", weights_only=True, mmap=zipfile.is_zipfile(path))
    except pickle.UnpicklingError as err:
        found = re.search(r"Unsupported global: GLOBAL ([\w.]+)", str(err))
        if not found:
            raise ModelLoadError(f"{path} cannot be read as a PyTorch checkpoint (damaged or not one)") from None
        raise ModelLoadError(
            f"{path} cannot be loaded safely: besides tensors it stores Python objects ({found[1]}), and unpickling "
            "them could run code from the file. Atelier loads .ckpt files only in PyTorch's weights-only mode. Use a "
            ".safetensors version of the model, or convert this file with a tool you trust.") from None
    except Exception as err:  # noqa: BLE001 - torch raises many types for a bad file
        raise ModelLoadError(f"{path} cannot be read as a PyTorch checkpoint ({type(err).__name__}: {err})") from None
    global_step = obj.get("global_step") if isinstance(obj, dict) else None
    while isinstance(obj, dict) and isinstance(obj.get("state_dict"), dict):
        obj = obj["state_dict"]
    if not isinstance(obj, dict):
        raise ModelLoadError(f"{path} holds a {type(obj).__name__}, not a dictionary of weights")
    tensors = {k: v for k, v in obj.items() if isinstance(v, torch.Tensor)}
    return tensors, int(global_step) if isinstance(global_step, int) else None


def open_checkpoint(path: str | os.PathLike) -> Checkpoint:
    """The names, shapes and metadata of a checkpoint's tensors; the tensors themselves load lazily."""
    path = Path(path).expanduser()
    if not path.is_file():
        raise ModelLoadError(f"{path} does not exist")
    if path.suffix.lower() == ".safetensors":
        shapes, metadata = _safetensors_header(path)

        def load() -> Mapping[str, torch.Tensor]:
            from safetensors.torch import load_file

            return load_file(path)  # memory-mapped: tensors are read when used

        return Checkpoint(path, shapes, metadata, None, load)
    tensors, global_step = _load_ckpt(path)  # mmap: nothing is read until used
    return Checkpoint(path, {k: tuple(v.shape) for k, v in tensors.items()}, {}, global_step, lambda: tensors)


# ----------------------------------------------------------------------------------------------
# Family detection from key names


def detect_checkpoint_family(shapes: Mapping[str, tuple[int, ...]], name: str = "the checkpoint") -> str:
    """"sd1", "sd2" or "sdxl" from a checkpoint's tensor names (and a shape or two); no tensor is read."""
    family = _detect(shapes, name)
    if family is None:
        raise ModelLoadError(f"{name}: cannot tell the model family (it has no text encoder weights, and its UNet's "
                             "cross-attention width is none of SD1.x's, SD2.x's or SDXL's); set model_family")
    return family


def _detect(shapes: Mapping[str, tuple[int, ...]], name: str) -> str | None:
    """The family, None when only the UNet is there and its width is unknown; raises for files that are no model."""
    keys = list(shapes)

    def has(prefix: str) -> bool:
        return any(k.startswith(prefix) for k in keys)

    if has("lora_unet_") or has("lora_te") or any(".lora_down." in k or ".lora_A." in k for k in keys):
        raise ModelLoadError(f"{name} is a LoRA, not a full model: give the base model it was trained on, "
                             "and load the LoRA as network_weights")
    if not has(UNET_PREFIX):
        if has("encoder.down.") or has("encoder.down_blocks.") or has(VAE_PREFIX):
            what = "a VAE on its own"
        elif has("down_blocks.") or has("text_model.") or has("encoder.layers."):
            what = "one component of a diffusers model; give the whole diffusers folder"
        else:
            what = "not a Stable Diffusion checkpoint"
        raise ModelLoadError(f"{name} has no UNet weights ({UNET_PREFIX}*): it looks like {what}")
    conv_in = shapes.get(UNET_PREFIX + "input_blocks.0.0.weight")
    if conv_in is not None and len(conv_in) == 4 and conv_in[1] != 4:
        raise ModelLoadError(f"{name} has a UNet with {conv_in[1]} input channels (an inpainting, depth or "
                             "instruct model); only text-to-image checkpoints (4 channels) are supported")
    if has("conditioner.embedders.1.model."):
        return "sdxl"
    if has("conditioner.embedders.0.model."):
        raise ModelLoadError(f"{name} looks like an SDXL refiner checkpoint, which is not supported; "
                             "use an SDXL base model")
    if has("cond_stage_model.model."):
        return "sd2"
    if has("cond_stage_model.transformer."):
        return "sd1"
    # No text encoder in the file: the UNet's cross-attention width tells the family.
    context = next((s[1] for k, s in shapes.items()
                    if k.startswith(UNET_PREFIX) and k.endswith("attn2.to_k.weight") and len(s) == 2), None)
    if has(UNET_PREFIX + "label_emb.") or context == 2048:
        return "sdxl"
    if context in (768, 1024):
        return "sd1" if context == 768 else "sd2"
    return None


def _prediction_type(ckpt: Checkpoint, family: str, default: str) -> str:
    if "v_pred" in ckpt.shapes:  # the SDXL v-prediction marker ComfyUI reads
        return "v_prediction"
    spec = ckpt.metadata.get("modelspec.prediction_type", "").strip().lower()
    if spec in ("v", "v_prediction"):
        return "v_prediction"
    if spec in ("epsilon", "eps"):
        return "epsilon"
    if family == "sd2" and ckpt.global_step == 875000:
        return "epsilon"  # Stability's SD2 512-base checkpoint (the same test diffusers' converter used)
    return default


# ----------------------------------------------------------------------------------------------
# Loading


def _fill(model: nn.Module, weights: Mapping[str, torch.Tensor], dtype: torch.dtype, what: str,
          name: str, family: ModelFamily) -> nn.Module:
    """Put converted weights into a model built on the meta device; every parameter must get one."""
    expected = model.state_dict()
    missing = [k for k, v in expected.items() if v.is_meta and k not in weights]
    if missing:
        raise ModelLoadError(
            f"{name} has no weights for the {what} ({len(missing)} of {len(expected)} missing, e.g. "
            f"{missing[0]!r}): is it a complete {family.title} checkpoint?")
    for key, value in weights.items():
        if key in expected and tuple(value.shape) != tuple(expected[key].shape):
            raise ModelLoadError(
                f"{name}: the {what} weight {key!r} has shape {tuple(value.shape)}, but the {family.title} "
                f"architecture has {tuple(expected[key].shape)}; the file does not match model_family "
                f"{family.name!r}")
    cast = {k: v.to(dtype) if v.is_floating_point() else v for k, v in weights.items() if k in expected}
    model.load_state_dict(cast, strict=False, assign=True)
    return model.eval()


def _clip_weights(model: nn.Module, weights: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Match the `text_model.` level of the model: transformers 5 has it only in CLIPTextModelWithProjection."""
    bare = {k.removeprefix("text_model."): v for k, v in weights.items()}
    if not hasattr(model, "text_model"):
        return bare
    return {k if k.startswith("text_projection") else "text_model." + k: v for k, v in bare.items()}


def load_single_file(path: str | os.PathLike, family_hint: str = "auto", weight_dtype: torch.dtype = torch.float32,
                     vae_path: str = "", *, config_dir: str | os.PathLike | None = None,
                     prediction_type: str | None = None) -> LoadedModel:
    """A single-file SD1.x / SD2.x / SDXL checkpoint as a LoadedModel, offline.

    `family_hint` is the user's model_family ("auto" or a family that must match the file).
    `config_dir` is a diffusers-style folder of component configs (default: the shipped `arch/`
    folder of the detected family; tests pass a tiny model's folder). `prediction_type` overrides
    what the file says (SDXL `v_pred` key, modelspec metadata) and the family default.
    """
    ckpt = open_checkpoint(path)
    hint = None if family_hint in ("auto", "", None) else family_hint
    detected = _detect(ckpt.shapes, str(ckpt.path)) or hint or detect_checkpoint_family(ckpt.shapes, str(ckpt.path))
    family = _FAMILIES[detected]
    if hint is not None and hint != detected:
        raise ModelLoadError(f"model_family = {family_hint!r} but {ckpt.path} looks like an {family.title} "
                             "checkpoint; set model_family = 'auto' or pick the right model")
    folder = Path(config_dir) if config_dir is not None else ARCH_DIR / ARCH_FOLDERS[detected]
    unet, vae, text_encoders = build_components(ckpt.tensors(), family, folder, weight_dtype, vae_path,
                                                str(ckpt.path))
    tokenizers = [_tokenizer(folder, name) for name in ("tokenizer", "tokenizer_2")[:len(text_encoders)]]
    sched_cfg = read_json(folder / "scheduler" / "scheduler_config.json")
    prediction = prediction_type or _prediction_type(ckpt, detected, sched_cfg.get("prediction_type", "epsilon"))
    scheduler = training_scheduler(sched_cfg, prediction)
    return LoadedModel(family, unet, vae, text_encoders, tokenizers, scheduler, prediction, str(ckpt.path))


def build_components(state: Mapping[str, torch.Tensor], family: ModelFamily, folder: Path,
                     weight_dtype: torch.dtype = torch.float32, vae_path: str = "",
                     name: str = "the checkpoint") -> tuple[nn.Module, nn.Module, list[nn.Module]]:
    """UNet, VAE and text encoders from weights in the original layout and the configs in `folder`.

    Models are built on the meta device and take the converted tensors as they are (no random
    init, no copy beyond the dtype cast); the VAE stays float32, as in base.load_common.
    """
    from accelerate import init_empty_weights
    from diffusers import AutoencoderKL, UNet2DConditionModel
    from diffusers.loaders.single_file_utils import (
        convert_ldm_clip_checkpoint,
        convert_ldm_unet_checkpoint,
        convert_ldm_vae_checkpoint,
        convert_open_clip_checkpoint,
    )
    from transformers import CLIPTextModel, CLIPTextModelWithProjection

    def fill(model: nn.Module, weights: Mapping[str, torch.Tensor], dtype: torch.dtype, what: str) -> nn.Module:
        return _fill(model, weights, dtype, what, name, family)

    def convert(what: str, fn: Callable[..., Mapping[str, torch.Tensor]], *args: Any, **kwargs: Any
                ) -> Mapping[str, torch.Tensor]:
        try:
            return fn(*args, **kwargs)
        except (KeyError, IndexError, AttributeError, RuntimeError) as err:  # a weight the config expects is absent
            raise ModelLoadError(f"{name}: the {what} weights do not match the {family.title} architecture "
                                 f"({type(err).__name__}: {err}); is it a complete {family.title} checkpoint?"
                                 ) from None

    unet_cfg = dict(UNet2DConditionModel.load_config(folder / "unet"))
    with init_empty_weights():
        unet = UNet2DConditionModel.from_config(unet_cfg)
    unet = fill(unet, convert("UNet", convert_ldm_unet_checkpoint, state, unet_cfg), weight_dtype, "UNet")

    if vae_path:
        vae = AutoencoderKL.from_pretrained(Path(vae_path).expanduser())
    else:
        vae_cfg = dict(AutoencoderKL.load_config(folder / "vae"))
        with init_empty_weights():
            vae = AutoencoderKL.from_config(vae_cfg)
        vae = fill(vae, convert("VAE", convert_ldm_vae_checkpoint, state, vae_cfg), torch.float32, "VAE")

    if family.name == "sdxl":
        parts = [(CLIPTextModel, "text_encoder", "conditioner.embedders.0.transformer."),
                 (CLIPTextModelWithProjection, "text_encoder_2", SDXL_TE2_PREFIX)]
    elif family.name == "sd2":
        parts = [(CLIPTextModel, "text_encoder", SD2_TE_PREFIX)]
    else:
        parts = [(CLIPTextModel, "text_encoder", "cond_stage_model.transformer.")]
    text_encoders = []
    for cls, sub, prefix in parts:
        with init_empty_weights():
            te = cls(cls.config_class.from_pretrained(folder / sub))
        own = {k: v for k, v in state.items() if k.startswith(prefix)}
        what = f"text encoder{' 2' if sub.endswith('_2') else ''} ({prefix}*)"
        if not own:
            weights: Mapping[str, torch.Tensor] = {}
        elif prefix.endswith(".model."):  # OpenCLIP layout: fused in_proj, text_projection matrix
            weights = convert(what, convert_open_clip_checkpoint, te, own, prefix=prefix)
        else:
            weights = convert(what, convert_ldm_clip_checkpoint, own, remove_prefix=prefix)
        text_encoders.append(fill(te, _clip_weights(te, weights), weight_dtype, what))
    return unet, vae, text_encoders


# ----------------------------------------------------------------------------------------------
# Saving


SAVE_DTYPES = {"float": torch.float32, "fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
_IMPLEMENTATION = {"sd1": "https://github.com/CompVis/stable-diffusion",
                   "sd2": "https://github.com/Stability-AI/stablediffusion",
                   "sdxl": "https://github.com/Stability-AI/generative-models"}


def _bare(module: nn.Module) -> nn.Module:
    from accelerate.utils import extract_model_from_parallel

    return extract_model_from_parallel(module)


def _cast(tensors: Mapping[str, torch.Tensor], dtype: torch.dtype | None) -> dict[str, torch.Tensor]:
    """CPU tensors in `dtype` (floating ones; None keeps each one's own); the trained weights are left alone."""
    return {k: (v.detach().to("cpu", dtype or v.dtype) if v.is_floating_point() else v.detach().cpu()).contiguous()
            for k, v in tensors.items()}


StateDict = Mapping[str, torch.Tensor]


def _states(model: LoadedModel, unet_state: StateDict | None, text_encoder_states: Sequence[StateDict | None] | None
            ) -> tuple[StateDict, list[StateDict]]:
    """The weights to save: the modules' own, or the ones given instead (e.g. EMA weights)."""
    unet = unet_state if unet_state is not None else _bare(model.unet).state_dict()
    given = list(text_encoder_states or [])
    given += [None] * (len(model.text_encoders) - len(given))
    tes = [s if s is not None else _bare(te).state_dict() for s, te in zip(given, model.text_encoders)]
    return unet, tes


def single_file_state_dict(model: LoadedModel, dtype: torch.dtype = torch.float16, unet_state: StateDict | None = None,
                           text_encoder_states: Sequence[StateDict | None] | None = None) -> dict[str, torch.Tensor]:
    """Every weight of `model` under its original (LDM for SD1.x/2.x, SGM for SDXL) name, cast to `dtype`."""
    return _cast(original_layout(model, unet_state, text_encoder_states), dtype)


def original_layout(model: LoadedModel, unet_state: StateDict | None = None,
                    text_encoder_states: Sequence[StateDict | None] | None = None) -> dict[str, torch.Tensor]:
    """Every weight of `model` under its original name, as it is (no copy where none is needed).

    `unet_state` / `text_encoder_states` replace the modules' own weights (None: the module's).
    """
    unet_sd, te_sds = _states(model, unet_state, text_encoder_states)
    vae = _bare(model.vae)
    tes = [_bare(te) for te in model.text_encoders]
    out = unet_to_ldm(unet_sd, _bare(model.unet).config)
    out.update(vae_to_ldm(vae.state_dict(), vae.config))
    name = model.family.name
    if name == "sd1":
        out.update(clip_to_ldm(te_sds[0], SD1_TE_PREFIX))
    elif name == "sd2":
        layers = tes[0].config.num_hidden_layers
        out.update(openclip_to_ldm(te_sds[0], SD2_TE_PREFIX, pad_layers_to=layers + 1))
    elif name == "sdxl":
        out.update(clip_to_ldm(te_sds[0], SDXL_TE1_PREFIX))
        out.update(openclip_to_ldm(te_sds[1], SDXL_TE2_PREFIX))
        if model.prediction_type == "v_prediction":
            out["v_pred"] = torch.zeros(0)  # ComfyUI's marker of a v-prediction SDXL model
    else:
        raise ValueError(f"no single-file layout for model family {name!r}")
    return out


def _resolution(model: LoadedModel) -> int:
    vae = _bare(model.vae)
    return int(getattr(vae.config, "sample_size", 512) or 512)


def single_file_metadata(model: LoadedModel, title: str, extra: Mapping[str, Any] | None = None) -> dict[str, str]:
    name = model.family.name
    v = model.prediction_type == "v_prediction"
    arch = model.family.modelspec_architecture
    if name == "sd2":
        arch = "stable-diffusion-v2-768-v" if v else "stable-diffusion-v2-512"
    size = _resolution(model)
    values: dict[str, Any] = {
        "modelspec.sai_model_spec": "1.0.0",
        "modelspec.architecture": arch,
        "modelspec.implementation": _IMPLEMENTATION[name],
        "modelspec.title": title,
        "modelspec.resolution": f"{size}x{size}",
        "modelspec.prediction_type": "v" if v else "epsilon",
        "modelspec.date": datetime.now().isoformat(timespec="seconds"),
    }
    values.update(extra or {})
    return {k: str(v) for k, v in values.items() if v is not None}


def _scheduler_config(model: LoadedModel) -> dict[str, Any]:
    """The inference scheduler to ship: the source folder's own, else the family's published one."""
    source = Path(model.source)
    own = source / "scheduler" / "scheduler_config.json"
    cfg = read_json(own) if source.is_dir() and own.exists() else \
        read_json(ARCH_DIR / ARCH_FOLDERS[model.family.name] / "scheduler" / "scheduler_config.json")
    cfg["prediction_type"] = model.prediction_type
    return cfg


def _fix_permissions(folder: Path) -> None:
    """safetensors and mkdtemp create owner-only files; give them the umask's ordinary permissions."""
    mask = current_umask()
    os.chmod(folder, 0o777 & ~mask)
    for root, dirs, files in os.walk(folder):
        for d in dirs:
            os.chmod(os.path.join(root, d), 0o777 & ~mask)
        for f in files:
            full = os.path.join(root, f)
            os.chmod(full, 0o666 & ~mask)
            with open(full, "rb") as fh:
                os.fsync(fh.fileno())


@contextlib.contextmanager
def _atomic_dir(final: Path) -> Iterator[Path]:
    """Yield a temp folder beside `final`; on success it replaces `final` (an older model folder) by rename."""
    final = Path(final)
    if final.exists() and not (final / "model_index.json").exists() and (not final.is_dir() or any(final.iterdir())):
        raise FileExistsError(f"{final} exists and is not a diffusers model folder; not replacing it")
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.", suffix=".tmp", dir=final.parent))
    old = final.parent / f".{final.name}.old-{os.getpid()}-{time.time_ns()}"
    try:
        yield tmp
        _fix_permissions(tmp)
        if final.exists():
            os.replace(final, old)
        os.replace(tmp, final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(old, ignore_errors=True)


def _save_diffusers_model(module: nn.Module, state: StateDict, folder: Path, dtype: torch.dtype | None) -> None:
    from safetensors.torch import save_file

    folder.mkdir(parents=True)
    module.save_config(folder)
    save_file(_cast(state, dtype), folder / "diffusion_pytorch_model.safetensors", metadata={"format": "pt"})


def save_diffusers_folder(model: LoadedModel, folder: Path, dtype: torch.dtype = torch.float16,
                          unet_state: StateDict | None = None,
                          text_encoder_states: Sequence[StateDict | None] | None = None) -> Path:
    """A complete diffusers pipeline folder (model_index.json, every component, tokenizers, scheduler).

    UNet and text encoders are written in `dtype`, the VAE (not trained) in its own precision.
    """
    import diffusers

    folder = Path(folder)
    unet_sd, te_sds = _states(model, unet_state, text_encoder_states)
    sched_cfg = _scheduler_config(model)
    sched_cls = getattr(diffusers, sched_cfg.get("_class_name", ""), None) or diffusers.DDIMScheduler
    tes = [_bare(te) for te in model.text_encoders]
    sdxl = model.family.name == "sdxl"
    index: dict[str, Any] = {
        "_class_name": "StableDiffusionXLPipeline" if sdxl else "StableDiffusionPipeline",
        "_diffusers_version": diffusers.__version__,
        "feature_extractor": [None, None], "image_encoder": [None, None],
        "scheduler": ["diffusers", sched_cls.__name__],
        "unet": ["diffusers", "UNet2DConditionModel"], "vae": ["diffusers", "AutoencoderKL"],
    }
    if sdxl:
        index["force_zeros_for_empty_prompt"] = True
    else:
        index.update(requires_safety_checker=False, safety_checker=[None, None])
    with _atomic_dir(folder) as tmp:
        _save_diffusers_model(_bare(model.unet), unet_sd, tmp / "unet", dtype)
        vae = _bare(model.vae)
        _save_diffusers_model(vae, vae.state_dict(), tmp / "vae", None)
        for i, (te, te_sd, tok) in enumerate(zip(tes, te_sds, model.tokenizers)):
            suffix = f"_{i + 1}" if i else ""
            te.save_pretrained(tmp / f"text_encoder{suffix}", state_dict=_cast(te_sd, dtype))
            _load_as_float32_by_default(tmp / f"text_encoder{suffix}" / "config.json")
            tok.save_pretrained(tmp / f"tokenizer{suffix}")
            index[f"text_encoder{suffix}"] = ["transformers", type(te).__name__]
            index[f"tokenizer{suffix}"] = ["transformers", "CLIPTokenizer"]
        sched_cls.from_config(sched_cfg).save_pretrained(tmp / "scheduler")
        (tmp / "model_index.json").write_text(json.dumps(dict(sorted(index.items())), indent=2) + "\n",
                                              encoding="utf-8")
    return folder


def _load_as_float32_by_default(config: Path) -> None:
    """transformers loads a text encoder in the dtype its config names, diffusers loads the UNet in float32:
    a config saved from a bf16 training run would make `from_pretrained(folder)` mix dtypes and fail."""
    data = json.loads(config.read_text(encoding="utf-8"))
    for key in ("dtype", "torch_dtype"):
        if key in data:
            data[key] = "float32"
    config.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")


def save_full_model(model: LoadedModel, out: str | os.PathLike, *, as_diffusers: bool = True,
                    as_single_file: bool = True, dtype: torch.dtype | str = torch.float16,
                    metadata: Mapping[str, Any] | None = None, unet_state: StateDict | None = None,
                    text_encoder_states: Sequence[StateDict | None] | None = None) -> list[Path]:
    """Save the whole model: `<out>/` as a diffusers folder and/or `<out>.safetensors` in the original layout.

    `out` is the path without extension (a trailing `.safetensors` is dropped). Both are written
    atomically (temp + rename) with ordinary permissions; call it on the main process only.
    `dtype` is the save precision (a torch dtype or "fp16"/"bf16"/"float"): the single file is all
    in it (VAE included, as published checkpoints are); the folder keeps the VAE's own precision.
    `metadata` adds to (or, with None values, removes from) the single file's `modelspec.*` header.
    `unet_state` / `text_encoder_states` are weights to save instead of the modules' own (EMA).
    Returns the paths written.
    """
    if isinstance(dtype, str):
        dtype = SAVE_DTYPES[dtype]
    out = Path(out).expanduser()
    stem = out.with_suffix("") if out.suffix.lower() == ".safetensors" else out
    written: list[Path] = []
    if as_single_file:
        from safetensors.torch import save_file

        file = stem.parent / (stem.name + ".safetensors")
        tensors = single_file_state_dict(model, dtype, unet_state, text_encoder_states)
        with atomic_path(file) as tmp:
            save_file(tensors, tmp, metadata=single_file_metadata(model, stem.name, metadata))
        written.append(file)
    if as_diffusers:
        written.append(save_diffusers_folder(model, stem, dtype, unet_state, text_encoder_states))
    return written
