"""An autoencoder in the layout a family reads but with other latent channels (an SD/SDXL VAE of 4 channels, FLUX.2's
of 32) is named before anything loads, as `ae` and as `vae`: the option, the file, what it holds and the channels the
family works in (trainers/models/checks.py, read from the safetensors header). The files are tiny autoencoders built
with diffusers' own classes, in the original layout sd-scripts and ComfyUI files use."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from trainers.models.checks import model_issues
from trainers.models.convert import vae_to_ldm
from trainers.models.rules import VAE_PREFIX


def _ldm(state: dict[str, torch.Tensor], config: dict) -> dict[str, torch.Tensor]:
    """A diffusers autoencoder's tensors in the original (LDM) layout; FLUX.2's batch norm keeps its name."""
    norm = {k: v for k, v in state.items() if k.startswith("bn.")}
    rest = {k: v for k, v in state.items() if not k.startswith("bn.")}
    out = {k.removeprefix(VAE_PREFIX): v for k, v in vae_to_ldm(rest, config).items()}
    return {k: v.contiguous() for k, v in {**out, **norm}.items()}


def _autoencoder(latent: int) -> tuple[dict[str, torch.Tensor], dict]:
    from diffusers import AutoencoderKL

    model = AutoencoderKL(block_out_channels=(8,), norm_num_groups=2, latent_channels=latent,
                          use_quant_conv=latent == 4, use_post_quant_conv=latent == 4)
    return model.state_dict(), dict(model.config)


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    from diffusers import AutoencoderKLFlux2

    tmp = tmp_path_factory.mktemp("autoencoders")
    out = {}
    for name, latent in (("sd_vae", 4), ("flux_ae", 16)):
        state, config = _autoencoder(latent)
        out[name] = tmp / f"{name}.safetensors"
        save_file(_ldm(state, config), out[name])
    flux2 = AutoencoderKLFlux2(block_out_channels=(8,), norm_num_groups=2, layers_per_block=1,
                               down_block_types=("DownEncoderBlock2D",), up_block_types=("UpDecoderBlock2D",))
    out["flux2_ae"] = tmp / "flux2_ae.safetensors"
    save_file(_ldm(flux2.state_dict(), dict(flux2.config)), out["flux2_ae"])
    for name, keys in (("flux", {"double_blocks.0.img_attn.qkv.weight": torch.zeros(3, 1)}),
                       ("zimage", {"cap_pad_token": torch.zeros(1, 2)}),
                       ("sd3", {"joint_blocks.0.x_block.attn.qkv.weight": torch.zeros(3, 1)})):
        out[name] = tmp / f"{name}.safetensors"
        save_file(keys, out[name])
    sdxl_vae = tmp / "sdxl_vae"  # a diffusers AutoencoderKL folder, as SDXL's vae/
    sdxl_vae.mkdir()
    state, config = _autoencoder(4)
    (sdxl_vae / "config.json").write_text(json.dumps({**config, "_class_name": "AutoencoderKL"}))
    save_file({k: v.contiguous() for k, v in state.items()}, sdxl_vae / "diffusion_pytorch_model.safetensors")
    out["sdxl_vae"] = sdxl_vae
    return out


def _said(model: Path, **options: Path) -> dict[str, str]:
    values = {"pretrained_model_name_or_path": str(model), **{k: str(v) for k, v in options.items()}}
    return {issue.field: issue.message for issue in model_issues(values)}


def test_flux_1s_own_ae_passes(files: dict[str, Path]) -> None:
    assert "ae" not in _said(files["flux"], ae=files["flux_ae"])
    assert "ae" not in _said(files["zimage"], ae=files["flux_ae"])  # Z-Image reads FLUX.1's ae


@pytest.mark.parametrize(("model", "ae", "held", "title"), [
    ("flux", "sd_vae", "an SD/SDXL VAE with 4 latent channels", "FLUX.1"),
    ("flux", "flux2_ae", "a FLUX.2 autoencoder with 32 latent channels (128 once patchified)", "FLUX.1"),
    ("zimage", "sd_vae", "an SD/SDXL VAE with 4 latent channels", "Z-Image"),
    ("zimage", "flux2_ae", "a FLUX.2 autoencoder with 32 latent channels (128 once patchified)", "Z-Image"),
])
def test_an_ae_of_other_latent_channels_is_named(files: dict[str, Path], model: str, ae: str, held: str,
                                                 title: str) -> None:
    message = _said(files[model], ae=files[ae]).get("ae", "")
    assert message.startswith(f"{files[ae]} holds {held}, but {title} models work in 16 latent channels: give the "
                              "autoencoder"), message
    assert message.endswith(f"that {title} models read"), message


@pytest.mark.parametrize("model", ["sd3", "flux"])
def test_an_sdxl_vae_folder_is_named_for_a_single_file_of_16_channels(files: dict[str, Path], model: str) -> None:
    message = _said(files[model], vae=files["sdxl_vae"]).get("vae", "")
    assert message.startswith(f"{files['sdxl_vae']} is an SD/SDXL VAE of 4 latent channels, but "), message
    assert "models work in 16: give a VAE made for" in message


def test_an_ae_in_another_layout_says_what_autoencoder_it_is(files: dict[str, Path], tmp_path: Path) -> None:
    state, _ = _autoencoder(4)
    diffusers_layout = tmp_path / "sd_vae_diffusers.safetensors"
    save_file({k: v.contiguous() for k, v in state.items()}, diffusers_layout)
    message = _said(files["flux"], ae=diffusers_layout)["ae"]
    assert message.startswith(f"{diffusers_layout} holds an SD/SDXL VAE with 4 latent channels, not the autoencoder "
                              "that FLUX.1 models read"), message
