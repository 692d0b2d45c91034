"""A tiny random-init FLUX.1-dev-structured pipeline (tests): one double and one single block, guidance embedding."""
from __future__ import annotations

from pathlib import Path

import torch

from trainers.models.tiny import text_config, write_tiny_tokenizer
from trainers.models.tiny_flow import t5_config, tiny_shifted_vae, write_tiny_t5_tokenizer


def build_tiny_flux(folder: Path, seed: int = 0, guidance_embeds: bool = True, reference_heads: bool = False) -> Path:
    """Save a tiny FLUX pipeline (CLIP-L and T5 text encoders) to `folder`; without `guidance_embeds`, schnell-like.
    `reference_heads`: attention heads as wide as the real models' (one 128-wide transformer head, 64-wide CLIP
    heads), whose configs can be read back from the weights alone, as for sd-scripts' separate files."""
    from diffusers import FlowMatchEulerDiscreteScheduler, FluxPipeline, FluxTransformer2DModel
    from transformers import CLIPTextModel, CLIPTokenizer, T5EncoderModel, T5TokenizerFast

    torch.manual_seed(seed)
    write_tiny_tokenizer(folder / "tokenizer")
    write_tiny_t5_tokenizer(folder / "tokenizer_2")
    tokenizer = CLIPTokenizer.from_pretrained(folder / "tokenizer")
    tokenizer_2 = T5TokenizerFast.from_pretrained(folder / "tokenizer_2")
    head, heads, rope, clip_width, clip_heads = ((128, 1, (16, 56, 56), 64, 1) if reference_heads
                                                else (8, 2, (2, 2, 4), 32, 4))
    transformer = FluxTransformer2DModel(
        patch_size=1, in_channels=16, num_layers=1, num_single_layers=1, attention_head_dim=head,
        num_attention_heads=heads, joint_attention_dim=32, pooled_projection_dim=clip_width,
        guidance_embeds=guidance_embeds, axes_dims_rope=rope)
    scheduler = FlowMatchEulerDiscreteScheduler(
        shift=3.0, use_dynamic_shifting=guidance_embeds, base_shift=0.5, max_shift=1.15, base_image_seq_len=256,
        max_image_seq_len=4096)
    pipe = FluxPipeline(
        scheduler=scheduler, vae=tiny_shifted_vae(0.3611, 0.1159),
        text_encoder=CLIPTextModel(text_config(len(tokenizer), clip_width, heads=clip_heads)), tokenizer=tokenizer,
        text_encoder_2=T5EncoderModel(t5_config(len(tokenizer_2), 32)), tokenizer_2=tokenizer_2,
        transformer=transformer)
    pipe.save_pretrained(folder)
    return folder


def write_reference_files(model_dir: Path, out: Path) -> dict[str, Path]:
    """A tiny FLUX folder (built with `reference_heads`) as sd-scripts' users have FLUX.1: the transformer in the
    reference layout (flux1.safetensors), clip_l, t5xxl and ae files, and a tokenizer_cache_dir holding the two
    tokenizers (as sd-scripts leaves it after a first run). Returns the options that name them."""
    from diffusers import AutoencoderKL, FluxTransformer2DModel
    from safetensors.torch import save_file
    from transformers import CLIPTextModel, CLIPTokenizer, T5EncoderModel, T5TokenizerFast

    from trainers.models.component_files import CLIP_L_TOKENIZER, T5_XXL_TOKENIZER
    from trainers.models.convert import VAE_PREFIX, vae_to_ldm
    from trainers.models.flux.reference import to_reference

    out.mkdir(parents=True, exist_ok=True)
    transformer = FluxTransformer2DModel.from_pretrained(model_dir, subfolder="transformer")
    vae = AutoencoderKL.from_pretrained(model_dir, subfolder="vae")
    clip = CLIPTextModel.from_pretrained(model_dir, subfolder="text_encoder")
    t5 = T5EncoderModel.from_pretrained(model_dir, subfolder="text_encoder_2")
    files = {"pretrained_model_name_or_path": out / "flux1.safetensors", "clip_l": out / "clip_l.safetensors",
             "t5xxl": out / "t5xxl.safetensors", "ae": out / "ae.safetensors", "tokenizer_cache_dir": out / "tokenizers"}
    states = {
        "pretrained_model_name_or_path": to_reference(transformer.state_dict(), transformer.config),
        "clip_l": {"text_model." + k.removeprefix("text_model."): v for k, v in clip.state_dict().items()},
        "t5xxl": {k: v for k, v in t5.state_dict().items() if k != "encoder.embed_tokens.weight"},  # tied to shared
        "ae": {k.removeprefix(VAE_PREFIX): v for k, v in vae_to_ldm(vae.state_dict(), vae.config).items()},
    }
    for option, state in states.items():
        save_file({k: v.contiguous() for k, v in state.items()}, files[option])
    CLIPTokenizer.from_pretrained(model_dir, subfolder="tokenizer").save_pretrained(
        files["tokenizer_cache_dir"] / CLIP_L_TOKENIZER.replace("/", "_"))
    T5TokenizerFast.from_pretrained(model_dir, subfolder="tokenizer_2").save_pretrained(
        files["tokenizer_cache_dir"] / T5_XXL_TOKENIZER.replace("/", "_"))
    return files
