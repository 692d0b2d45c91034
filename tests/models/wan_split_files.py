"""What the Wan single-file tests share: a tiny Wan of the real classes of each kind (heads as wide as the published
ones, 128, and the published VAEs' structure and latent statistics: what the files do not tell) saved as a diffusers
folder, and the same model written as ComfyUI's users have it: diffusion_models file(s) in Wan-AI's names,
umt5_xxl_fp16, the VAE file (Wan-AI's layout for Wan 2.1's, diffusers' for Wan 2.2's 48-channel one) and for Wan 2.1 I2V
clip_vision_h in transformers' layout.

Kinds: "t2v" (Wan 2.1 T2V), "i2v" (Wan 2.1 I2V: 36 channels, an image projection, a CLIP image encoder), "pair" and
"pair_i2v" (Wan 2.2 A14B: two experts, T2V or I2V), "ti2v" (Wan 2.2 TI2V 5B: 48 channels and its VAE)."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file

LATENTS = {"t2v": 16, "i2v": 16, "pair": 16, "pair_i2v": 16, "ti2v": 48}
IMAGE_WIDTH = 80  # the CLIP image encoder's: one head as wide as ViT-H/14's
FILE_NAMES = {"t2v": "wan2.1_t2v_tiny_fp16.safetensors", "i2v": "wan2.1_i2v_480p_tiny_fp16.safetensors",
              "pair": "wan2.2_t2v_low_noise_tiny_fp16.safetensors",
              "pair_i2v": "wan2.2_i2v_low_noise_tiny_fp16.safetensors", "ti2v": "wan2.2_ti2v_tiny_fp16.safetensors"}


def _transformer(kind: str) -> Any:
    from diffusers import WanTransformer3DModel

    from trainers.models.wan.tiny import TEXT_WIDTH

    latents = LATENTS[kind]
    image = {"image_dim": IMAGE_WIDTH, "added_kv_proj_dim": 128} if kind == "i2v" else {}
    return WanTransformer3DModel(patch_size=(1, 2, 2), num_attention_heads=1, attention_head_dim=128,
                                 in_channels=2 * latents + 4 if kind in ("i2v", "pair_i2v") else latents,
                                 out_channels=latents, text_dim=TEXT_WIDTH, freq_dim=16, ffn_dim=32, num_layers=2,
                                 cross_attn_norm=True, qk_norm="rms_norm_across_heads", rope_max_seq_len=1024, **image)


def _vae(kind: str) -> Any:
    from diffusers import AutoencoderKLWan

    from trainers.models.wan import single_file

    published = single_file.published("vae22" if kind == "ti2v" else "vae")
    structure = {k: published[k] for k in ("dim_mult", "num_res_blocks", "temperal_downsample", "latents_mean",
                                           "latents_std", "z_dim")}
    if kind == "ti2v":
        structure.update({k: published[k] for k in ("is_residual", "in_channels", "out_channels", "patch_size",
                                                    "scale_factor_spatial")}, decoder_base_dim=16)
    return AutoencoderKLWan(base_dim=8, attn_scales=[], **structure)


def _image_encoder() -> tuple[Any, Any]:
    from transformers import CLIPImageProcessor, CLIPVisionConfig, CLIPVisionModel

    encoder = CLIPVisionModel(CLIPVisionConfig(hidden_size=IMAGE_WIDTH, intermediate_size=32, num_hidden_layers=2,
                                               num_attention_heads=1, image_size=32, patch_size=8, hidden_act="gelu"))
    return encoder, CLIPImageProcessor(size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32})


def tiny_folder(folder: Path, kind: str) -> Path:
    """A tiny diffusers folder of `kind`."""
    import diffusers
    from transformers import T5TokenizerFast

    from trainers.models.tiny_flow import write_tiny_t5_tokenizer
    from trainers.models.wan.tiny import tiny_umt5
    from trainers.models.wan.wan22.rules import I2V_BOUNDARY, T2V_BOUNDARY

    torch.manual_seed(0)
    write_tiny_t5_tokenizer(folder / "tokenizer")
    tokenizer = T5TokenizerFast.from_pretrained(folder / "tokenizer")
    parts: dict[str, Any] = {"tokenizer": tokenizer, "text_encoder": tiny_umt5(len(tokenizer)), "vae": _vae(kind),
                             "scheduler": diffusers.FlowMatchEulerDiscreteScheduler(shift=3.0),
                             "transformer": _transformer(kind)}
    if kind in ("pair", "pair_i2v"):
        parts.update(transformer_2=_transformer(kind), boundary_ratio=I2V_BOUNDARY if kind == "pair_i2v" else
                     T2V_BOUNDARY)
    if kind == "i2v":
        parts["image_encoder"], parts["image_processor"] = _image_encoder()
    pipeline = "WanImageToVideoPipeline" if kind in ("i2v", "pair_i2v") else "WanPipeline"
    extra = {"expand_timesteps": True} if kind == "ti2v" else {}
    getattr(diffusers, pipeline)(**parts, **extra).save_pretrained(folder)
    return folder


def _diffusion_model(unet: torch.nn.Module) -> dict[str, torch.Tensor]:
    from trainers.models.wan import single_file

    return {f"model.diffusion_model.{k}": v for k, v in single_file.to_reference(unet.state_dict()).items()}


def comfy_files(folder: Path, out: Path, kind: str) -> dict[str, str]:
    """The folder's model as ComfyUI's users have it (diffusion_models/, text_encoders/, vae/, clip_vision/) and the
    tokenizer where a first run leaves it in tokenizer_cache_dir: the options naming them."""
    from trainers.models import load_model
    from trainers.models.wan import single_file
    from trainers.models.wan.split_files import SPLIT_PARTS
    from trainers.models.wan.ti2v.vae_files import TI2V_PARTS

    model = load_model(str(folder), "auto", torch.float32)
    text, vae = TI2V_PARTS if kind == "ti2v" else SPLIT_PARTS
    files = {"pretrained_model_name_or_path": out / "diffusion_models" / FILE_NAMES[kind],
             "text_encoder": out / "text_encoders" / "umt5_xxl_fp16.safetensors",
             "ae": out / "vae" / ("diffusion_pytorch_model.safetensors" if kind == "ti2v" else
                                  "wan_2.1_vae.safetensors"),
             "tokenizer_cache_dir": out / "tokenizers"}
    unet = model.unet.transformer_2 if kind in ("pair", "pair_i2v") else model.unet  # the low-noise expert: dit
    states = {"pretrained_model_name_or_path": _diffusion_model(unet),
              "text_encoder": single_file.file_state(text, model.text_encoders[0]),
              "ae": single_file.file_state(vae, model.vae)}
    if kind in ("pair", "pair_i2v"):
        files["dit_high_noise"] = out / "diffusion_models" / FILE_NAMES[kind].replace("low_noise", "high_noise")
        states["dit_high_noise"] = _diffusion_model(model.unet.transformer)
    if kind == "i2v":
        files["clip"] = out / "clip_vision" / "clip_vision_h.safetensors"
        states["clip"] = {k if k.startswith("vision_model.") else f"vision_model.{k}": v  # ComfyUI's names
                          for k, v in model.family.image_encoder.state_dict().items()}
    for option, state in states.items():
        files[option].parent.mkdir(parents=True, exist_ok=True)
        save_file({k: v.contiguous() for k, v in state.items()}, files[option])
    model.tokenizers[0].save_pretrained(files["tokenizer_cache_dir"] / "google_umt5-xxl")
    values = {k: str(v) for k, v in files.items()}
    return {**values, "model_family": "wan22"} if kind == "pair" else values  # a T2V pair's files are named
