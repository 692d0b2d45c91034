"""FLUX.2's autoencoder (AutoencoderKLFlux2: 32 latent channels and a batch norm over the 2x2-patchified latents) from
a file of its own, the `ae` of ERNIE-Image's and Ideogram 4's single files: Black Forest Labs' layout (ComfyUI's
vae/flux2-vae.safetensors), FLUX.1's original names with the quant convolutions inside the encoder and decoder
(`encoder.quant_conv`, `decoder.post_quant_conv`) and `bn.running_mean` / `bn.running_var`, as diffusers'
scripts/convert_flux2_to_diffusers.py reads it. Its sizes come from the shapes; the batch norm's eps and momentum are
AutoencoderKLFlux2's defaults (the published config's)."""
from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import TYPE_CHECKING

import torch
from torch import nn

from trainers.models.base import ModelLoadError

if TYPE_CHECKING:
    from trainers.models.flow_rules import Part

# diffusers' top-level quant convolutions -> where Black Forest Labs' file keeps them
QUANT_CONVS = {"quant_conv.": "encoder.quant_conv.", "post_quant_conv.": "decoder.post_quant_conv."}
STATISTICS = ("bn.running_mean", "bn.running_var")


def load(part: "Part", state: Mapping[str, torch.Tensor], dtype: torch.dtype) -> nn.Module:
    """The part's autoencoder (float32, as every VAE here) from its file's tensors."""
    return autoencoder(state)


def file_state(part: "Part", module: nn.Module) -> dict[str, torch.Tensor]:
    """What `load` reads back: the autoencoder in Black Forest Labs' layout."""
    return to_reference(module.state_dict(), module.config)


def to_reference(state: Mapping[str, torch.Tensor], config: Mapping[str, object]) -> dict[str, torch.Tensor]:
    """An AutoencoderKLFlux2's state dict in Black Forest Labs' layout (the batch norm's step counter left out, as
    diffusers' conversion reads none)."""
    from trainers.models.convert import VAE_PREFIX, vae_to_ldm

    kl = {k: v for k, v in state.items() if not k.startswith("bn.")}
    out = {}
    for key, value in vae_to_ldm(kl, config).items():
        key = key.removeprefix(VAE_PREFIX)
        moved = next((new + key[len(old):] for old, new in QUANT_CONVS.items() if key.startswith(old)), key)
        out[moved] = value
    return {**out, **{k: state[k] for k in STATISTICS}}


def autoencoder(state: Mapping[str, torch.Tensor]) -> nn.Module:
    """AutoencoderKLFlux2 from Black Forest Labs' layout: the encoder and decoder read as FLUX.1's ae (diffusers'
    LDM conversion), the batch-norm statistics as they are."""
    from accelerate import init_empty_weights
    from diffusers import AutoencoderKLFlux2

    from trainers.models.component_files import autoencoder as original_autoencoder
    from trainers.models.component_files import fill_meta

    if missing := [k for k in STATISTICS if k not in state]:
        raise ModelLoadError(f"ae: the file has no {missing[0]}: it is not FLUX.2's autoencoder (flux2-vae."
                             "safetensors, 32 latent channels with a batch norm); FLUX.1's ae.safetensors has none")
    moved = {}
    for key, value in state.items():
        old = next((o for o, new in QUANT_CONVS.items() if key.startswith(new)), None)
        moved[key if old is None else old + key[len(QUANT_CONVS[old]):]] = value
    kl = original_autoencoder({k: v for k, v in moved.items() if not k.startswith("bn.")}, 1.0, 0.0)
    accepted = inspect.signature(AutoencoderKLFlux2.__init__).parameters
    with init_empty_weights():
        model = AutoencoderKLFlux2.from_config({k: v for k, v in kl.config.items() if k in accepted})
    if tuple(state[STATISTICS[0]].shape) != tuple(model.bn.running_mean.shape):
        raise ModelLoadError(f"ae: the batch norm holds {state[STATISTICS[0]].shape[0]} channels, "
                             f"{model.bn.running_mean.shape[0]} expected for its {model.config.latent_channels} "
                             "latent channels in 2x2 patches")
    weights = {**kl.state_dict(), **{k: state[k] for k in STATISTICS}}
    return fill_meta(model, weights, torch.float32, "FLUX.2 autoencoder")
