"""Loading diffusers components, shared by the families: configs, weights, tokenizers, the training noise schedule."""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn

from trainers.models.rules import ModelLoadError, read_json


def load_component(cls: Any, folder: Path, subfolder: str, dtype: torch.dtype, random_init: bool) -> Any:
    """One model component from a diffusers folder; with `random_init`, only its config is read.

    Random init builds real-size architectures from published configs (benchmarks, no weights).
    """
    is_diffusers = hasattr(cls, "load_config")
    if random_init:
        if is_diffusers:
            return cls.from_config(cls.load_config(folder / subfolder)).to(dtype)
        return cls(cls.config_class.from_pretrained(folder / subfolder)).to(dtype)
    if is_diffusers:
        return named_load(folder / subfolder, "pretrained_model_name_or_path",
                          lambda: cls.from_pretrained(folder, subfolder=subfolder or None, torch_dtype=dtype))
    return named_load(folder / subfolder, "pretrained_model_name_or_path",
                      lambda: cls.from_pretrained(folder, subfolder=subfolder, dtype=dtype))


def named_load(where: Path, option: str, load: Callable[[], Any]) -> Any:
    """`load()`, its errors of a damaged or mismatched component (a weights file cut short that the checks before
    loading could not read, shapes that do not fit the config) as a ModelLoadError naming the folder and option."""
    from safetensors import SafetensorError

    try:
        return load()
    except (OSError, ValueError, KeyError, RuntimeError, SafetensorError) as err:
        if "out of memory" in str(err).lower():
            raise
        raise ModelLoadError(f"{option}: {where} cannot be loaded ({type(err).__name__}: {str(err)[:500]}); is it "
                             "complete and of this model? Download or copy it again") from None


def load_tokenizer(folder: Path, subfolder: str, random_init: bool) -> Any:
    from transformers import CLIPTokenizer

    if random_init and not (folder / subfolder).is_dir():
        import tempfile

        from trainers.models.tiny import write_tiny_tokenizer

        tmp = Path(tempfile.mkdtemp(prefix="atelier-tokenizer-"))
        write_tiny_tokenizer(tmp)
        return CLIPTokenizer.from_pretrained(tmp)
    return CLIPTokenizer.from_pretrained(folder, subfolder=subfolder)


def load_vae(folder: Path, vae_path: str, random_init: bool = False, vae_class: str = "AutoencoderKL") -> nn.Module:
    """The model's VAE (a diffusers `vae_class`) in float32, or the one `vae_path` names instead."""
    import diffusers

    if vae_path:
        return vae_folder(vae_path, vae_class)
    return load_component(getattr(diffusers, vae_class), folder, "vae", torch.float32, random_init)


def vae_folder(vae_path: str, vae_class: str = "AutoencoderKL") -> nn.Module:
    """The VAE the `vae` option names (a diffusers folder), float32; a folder that fails to load is named."""
    import diffusers

    folder = Path(vae_path).expanduser()
    return named_load(folder, "vae", lambda: getattr(diffusers, vae_class).from_pretrained(folder))


def load_common(folder: Path, weight_dtype: torch.dtype, vae_path: str,
                random_init: bool = False) -> tuple[nn.Module, nn.Module, Any, str]:
    """UNet, VAE, DDPM training scheduler and prediction type: the same for every SD family."""
    from diffusers import UNet2DConditionModel

    unet = load_component(UNet2DConditionModel, folder, "unet", weight_dtype, random_init)
    vae = load_vae(folder, vae_path, random_init)
    sched_cfg = read_json(folder / "scheduler" / "scheduler_config.json")
    prediction_type = sched_cfg.get("prediction_type", "epsilon")
    return unet, vae, training_scheduler(sched_cfg, prediction_type), prediction_type


def training_scheduler(sched_cfg: dict[str, Any], prediction_type: str) -> Any:
    """The DDPM noise schedule training adds noise with, from a model's (inference) scheduler config."""
    from diffusers import DDPMScheduler

    return DDPMScheduler(
        num_train_timesteps=sched_cfg.get("num_train_timesteps", 1000),
        beta_start=sched_cfg.get("beta_start", 0.00085),
        beta_end=sched_cfg.get("beta_end", 0.012),
        beta_schedule=sched_cfg.get("beta_schedule", "scaled_linear"),
        clip_sample=False,
        prediction_type=prediction_type,
    )


def final_layer_norm(text_encoder: nn.Module) -> nn.Module:
    # transformers 5 dropped the `text_model.` level from CLIPTextModel but not from ...WithProjection.
    return getattr(text_encoder, "text_model", text_encoder).final_layer_norm
