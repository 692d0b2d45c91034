"""Loading a single-file checkpoint (the original LDM/SGM layout) as a LoadedModel, offline.

The family is told from the file's key names alone (each family claims its own; the most specific
first); the diffusers components are built from the architecture configs the family ships (no hub
access) and filled through diffusers' own LDM->diffusers converters.
"""
from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch
from torch import nn

from trainers.models.base import LoadedModel, ModelFamily, ModelFiles, ModelLoadError
from trainers.models.components import read_json, training_scheduler, vae_folder
from trainers.models.families import family as find_family
from trainers.models.rules import checkpoint_rules, unknown_checkpoint
from trainers.models.single_file.checkpoint import Checkpoint, open_checkpoint
from trainers.models.single_file.tokenizer import folder_tokenizer


def detect_checkpoint_family(shapes: Mapping[str, tuple[int, ...]], name: str = "the checkpoint") -> str:
    """The family name of a checkpoint from its tensor names (and a shape or two); no tensor is read."""
    found = checkpoint_rules(shapes, name)
    if found is None:
        raise unknown_checkpoint(name)
    return found.name


def _prediction_type(ckpt: Checkpoint, family: ModelFamily, default: str) -> str:
    if "v_pred" in ckpt.shapes:  # the SDXL v-prediction marker ComfyUI reads
        return "v_prediction"
    spec = ckpt.metadata.get("modelspec.prediction_type", "").strip().lower()
    if spec in ("v", "v_prediction"):
        return "v_prediction"
    if spec in ("epsilon", "eps"):
        return "epsilon"
    return family.checkpoint_prediction_type(ckpt.global_step) or default


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
                     prediction_type: str | None = None, files: ModelFiles = ModelFiles()) -> LoadedModel:
    """A single-file SD1.x / SD2.x / SDXL checkpoint as a LoadedModel, offline (FLUX.1: its family loads it, with
    the component `files`).

    `family_hint` is the user's model_family ("auto" or a family that must match the file).
    `config_dir` is a diffusers-style folder of component configs (default: the shipped `arch/`
    folder of the detected family; tests pass a tiny model's folder). `prediction_type` overrides
    what the file says (SDXL `v_pred` key, modelspec metadata) and the family default.
    """
    ckpt = open_checkpoint(path)
    hint = None if family_hint in ("auto", "", None) else family_hint
    found = checkpoint_rules(ckpt.shapes, str(ckpt.path), None if hint is None else find_family(hint))
    detected = found.name if found is not None else hint or detect_checkpoint_family(ckpt.shapes, str(ckpt.path))
    family = find_family(detected)
    if hint is not None and hint != detected:
        raise ModelLoadError(f"model_family = {family_hint!r} but {ckpt.path} looks like a checkpoint of the "
                             f"{family.title} family; set model_family = 'auto' or pick the right model")
    if family.own_checkpoint_layout:
        return family.load_checkpoint(ckpt, weight_dtype, vae_path, files)
    folder = Path(config_dir) if config_dir is not None else family.arch_dir
    unet, vae, text_encoders = build_components(ckpt.tensors(), family, folder, weight_dtype, vae_path,
                                                str(ckpt.path))
    tokenizers = [folder_tokenizer(folder, part.subfolder.replace("text_encoder", "tokenizer"))
                  for part in family.single_file_text_encoders]
    sched_cfg = read_json(folder / "scheduler" / "scheduler_config.json")
    prediction = prediction_type or _prediction_type(ckpt, family, sched_cfg.get("prediction_type", "epsilon"))
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
        vae = vae_folder(vae_path)
    else:
        vae_cfg = dict(AutoencoderKL.load_config(folder / "vae"))
        with init_empty_weights():
            vae = AutoencoderKL.from_config(vae_cfg)
        vae = fill(vae, convert("VAE", convert_ldm_vae_checkpoint, state, vae_cfg), torch.float32, "VAE")

    import transformers

    text_encoders = []
    for part in family.single_file_text_encoders:
        cls, sub, prefix = getattr(transformers, part.cls), part.subfolder, part.prefix
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
