"""Qwen-Image 2.1's autoencoder in the published layout (RGBA in and out, diffusers' class defaults) trains and
renders: the trainer's RGB images reach it as the pipeline gives it an opaque picture, and what it decodes comes back
as RGB; the 12-channel patched stand-in still works the same way."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from trainers.models import load_model
from trainers.models.qwen_image21.family import QWEN_IMAGE21, encode_opaque
from trainers.models.qwen_image21.tiny import build_tiny_qwen_image21, tiny_qwen21_vae
from trainers.train.latents import latent_distribution


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_qwen_image21(tmp_path_factory.mktemp("qwen21") / "model")


def test_the_first_step_encodes_rgb_images_with_the_published_rgba_autoencoder(model_dir: Path) -> None:
    model = load_model(str(model_dir), "auto", torch.float32)
    assert model.vae.config.in_channels == 4 and model.vae.config.patch_size is None  # the published layout
    pixels = torch.rand(2, 3, 64, 64) * 2 - 1
    mean, std = latent_distribution(model, {"pixels": pixels})  # what the trainer's first step does
    assert mean.shape == std.shape == (2, 4, 4, 4)
    raw = tiny_qwen21_vae().to(torch.float32)
    raw.load_state_dict(model.vae.state_dict())
    # the pipeline converts an opaque RGB image to RGBA: alpha 255, 1.0 in the autoencoder's [-1, 1]
    rgba = torch.cat([pixels, torch.ones(2, 1, 64, 64)], dim=1).unsqueeze(2)
    assert torch.allclose(mean, raw.encode(rgba).latent_dist.mean[:, :, 0], atol=1e-5)


@pytest.mark.parametrize("rgba", [True, False], ids=["published RGBA", "12-channel stand-in"])
def test_samples_and_generate_decode_rgb_pictures(rgba: bool) -> None:
    from trainers.models.qwen_image.family import encode_single_frames

    vae = tiny_qwen21_vae(rgba).eval()
    encode_single_frames(vae)  # as loading prepares it
    encode_opaque(vae)
    latents = vae.encode(torch.rand(1, 3, 32, 48) * 2 - 1).latent_dist.mode()
    tokens = latents.flatten(2).transpose(1, 2)  # the pipeline's output_type="latent": one token per latent
    with torch.no_grad():
        pixels = QWEN_IMAGE21.decode_latents(vae, tokens, 48, 32)
    assert pixels.shape == (1, 3, 32, 48)
    from diffusers.image_processor import VaeImageProcessor

    assert VaeImageProcessor(vae_scale_factor=16).postprocess(pixels, output_type="pil")[0].mode == "RGB"
