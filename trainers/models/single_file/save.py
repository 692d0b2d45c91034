"""Saving a whole model: a diffusers folder and/or one `.safetensors` file in the original layout (convert.py)
that A1111, Forge and ComfyUI load. Both are written atomically (temp + rename) with ordinary permissions."""
from __future__ import annotations

import json
import os
import shutil
from collections.abc import Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import torch
from torch import nn

from trainers.core.fsio import atomic_dir, atomic_path
from trainers.models.base import LoadedModel
from trainers.models.components import read_json
from trainers.models.convert import unet_to_ldm, vae_to_ldm

SAVE_DTYPES = {"float": torch.float32, "fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
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
    if model.family.own_checkpoint_layout:  # SD3's and FLUX's reference layouts
        return model.family.to_checkpoint(model, unet_sd)
    vae = _bare(model.vae)
    out = unet_to_ldm(unet_sd, _bare(model.unet).config)
    out.update(vae_to_ldm(vae.state_dict(), vae.config))
    tes = [_bare(te) for te in model.text_encoders]
    out.update(model.family.text_encoders_to_original(list(te_sds), tes, model.prediction_type))
    return out


def _resolution(model: LoadedModel) -> int:
    if model.family.objective == "flow":  # their VAE configs carry no image size
        return model.family.native_size
    vae = _bare(model.vae)
    return int(getattr(vae.config, "sample_size", 512) or 512)


def single_file_metadata(model: LoadedModel, title: str, extra: Mapping[str, Any] | None = None) -> dict[str, str]:
    v = model.prediction_type == "v_prediction"
    size = _resolution(model)
    values: dict[str, Any] = {
        "modelspec.sai_model_spec": "1.0.1",
        "modelspec.architecture": model.family.architecture_for(v),
        "modelspec.implementation": model.family.implementation,
        "modelspec.title": title,
        "modelspec.resolution": f"{size}x{size}",
        "modelspec.prediction_type": None if model.family.objective == "flow" else "v" if v else "epsilon",
        "modelspec.date": datetime.now().isoformat(timespec="seconds"),
    }
    values.update(extra or {})
    return {k: str(v) for k, v in values.items() if v is not None}


def _scheduler_config(model: LoadedModel) -> dict[str, Any]:
    """The inference scheduler to ship: the source folder's own, else the family's published one (flow families:
    the one the model was loaded with, which is their inference scheduler)."""
    source = Path(model.source)
    own = source / "scheduler" / "scheduler_config.json"
    if source.is_dir() and own.exists():
        cfg = read_json(own)
    elif model.family.objective == "flow":
        cfg = {**model.noise_scheduler.config, "_class_name": type(model.noise_scheduler).__name__}
    else:
        cfg = read_json(model.family.arch_dir / "scheduler" / "scheduler_config.json")
    if model.family.objective == "ddpm":  # flow-matching schedulers have no prediction type
        cfg["prediction_type"] = model.prediction_type
    if getattr(model.noise_scheduler, "config", {}).get("rescale_betas_zero_snr"):  # trained with zero_terminal_snr
        cfg["rescale_betas_zero_snr"] = True
    return cfg


def _save_diffusers_model(module: nn.Module, state: StateDict, folder: Path, dtype: torch.dtype | None) -> None:
    from safetensors.torch import save_file

    folder.mkdir(parents=True)
    module.save_config(folder)
    save_file(_cast(state, dtype), folder / "diffusion_pytorch_model.safetensors", metadata={"format": "pt"})


def _unused_optional_components(pipeline_class: str) -> dict[str, list[None]]:
    """The IP-Adapter components SD pipelines declare, as their published folders list them (unset); left out for a
    pipeline that takes no such argument (WanPipeline warns at every load that it ignores them)."""
    import inspect

    import diffusers

    pipeline = getattr(diffusers, pipeline_class, None)
    takes = inspect.signature(pipeline.__init__).parameters if pipeline is not None else {}
    return {name: [None, None] for name in ("feature_extractor", "image_encoder") if name in takes}


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
    index: dict[str, Any] = {
        "_class_name": model.family.pipeline_class,
        "_diffusers_version": diffusers.__version__,
        **_unused_optional_components(model.family.pipeline_class),
        "scheduler": ["diffusers", sched_cls.__name__],
        "vae": ["diffusers", type(_bare(model.vae)).__name__],
    }
    parts = model.family.denoiser_parts(_bare(model.unet), unet_sd)
    index.update({name: ["diffusers", type(module).__name__] for name, (module, _) in parts.items()})
    index.update(model.family.model_index())
    with atomic_dir(folder, may_replace=_is_model_folder, kind="a diffusers model folder") as tmp:
        for name, (module, state) in parts.items():
            _save_diffusers_model(module, state, tmp / name, dtype)
        vae = _bare(model.vae)
        _save_diffusers_model(vae, vae.state_dict(), tmp / "vae", None)
        for i, (te, te_sd, tok) in enumerate(zip(tes, te_sds, model.tokenizers)):
            suffix = f"_{i + 1}" if i else ""
            te_sd = _cast(te_sd, dtype)
            te.save_pretrained(tmp / f"text_encoder{suffix}",
                               state_dict=_classic_names(te_sd) if type(te).__name__.startswith("CLIP") else te_sd)
            _load_as_float32_by_default(tmp / f"text_encoder{suffix}" / "config.json")
            tok.save_pretrained(tmp / f"tokenizer{suffix}")
            index[f"text_encoder{suffix}"] = ["transformers", type(te).__name__]
            index[f"tokenizer{suffix}"] = ["transformers", type(tok).__name__]
        sched_cls.from_config(sched_cfg).save_pretrained(tmp / "scheduler")
        for name, (source, entry) in model.family.kept_components().items():
            shutil.copytree(source, tmp / name)
            index[name] = entry
        index.update(model.family.save_components(tmp))
        (tmp / "model_index.json").write_text(json.dumps(dict(sorted(index.items())), indent=2) + "\n",
                                              encoding="utf-8")
    return folder


def _classic_names(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """CLIP text-encoder weights under the names transformers 4.x and published SD folders use (`text_model.`):
    transformers 5 saves CLIPTextModel without that level, and older loaders (transformers 4.x, ComfyUI's
    diffusers loader) then leave the encoder at random weights. transformers 5 reads either."""
    return {k if k.startswith(("text_model.", "text_projection")) else f"text_model.{k}": v for k, v in state.items()}


def _is_model_folder(folder: Path) -> bool:
    """An earlier save of ours (a diffusers folder), or an empty folder: what a model save may replace."""
    return (folder / "model_index.json").exists() or folder.is_dir() and not any(folder.iterdir())


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
