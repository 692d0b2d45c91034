"""Wan 2.2 TI2V 5B's single files: its diffusion_models file (48 input channels) with UMT5-XXL and its 48-channel
autoencoder in diffusers' layout; the autoencoder in Wan-AI's layout (ComfyUI's wan2.2_vae) is refused by name."""
from __future__ import annotations

from trainers.core.errors import ConfigIssue
from trainers.models.flow_rules import Part
from trainers.models.wan.split_files import READER, UMT5_PART, VAE_KEYS, SingleFiles, given, safetensors_shapes, \
    vae_layout

TI2V_PARTS = (UMT5_PART, Part("vae", "vae.", "ae", "Wan 2.2 autoencoder in diffusers' layout "
                              "(vae/diffusion_pytorch_model.safetensors of Wan-AI/Wan2.2-TI2V-5B-Diffusers)",
                              reader=READER, latent_channels=48, denoiser_input=("patch_embedding.weight", 1),
                              file_keys=VAE_KEYS))
TI2V_FILES = SingleFiles({"ti2v": "Wan 2.2 TI2V 5B's file (48 input channels)"}, "wan2.2_ti2v_5B_fp16.safetensors",
                         TI2V_PARTS)


def vae22_issues(ae: str) -> list[ConfigIssue]:
    """Wan 2.2's 48-channel autoencoder in Wan-AI's layout (ComfyUI's vae/wan2.2_vae.safetensors), which diffusers'
    convert_wan_vae_to_diffusers does not read (it takes Wan 2.1's structure): named, with the file that is read."""
    path = given(ae)
    names = safetensors_shapes(path) if path is not None and path.is_file() and path.suffix.lower() == ".safetensors" \
        else None
    if names is None or vae_layout(names) != "nested":
        return []
    return [ConfigIssue("ae", f"{path.name} is Wan 2.2's autoencoder in Wan-AI's layout (ComfyUI's wan2.2_vae), "
                        "which diffusers' convert_wan_vae_to_diffusers does not read: give the diffusers VAE's file "
                        "instead, vae/diffusion_pytorch_model.safetensors of Wan-AI/Wan2.2-TI2V-5B-Diffusers", "model")]
