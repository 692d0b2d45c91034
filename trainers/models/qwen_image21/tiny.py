"""A tiny random-init Qwen-Image 2.1 folder (tests): two transformer blocks, a two-layer Qwen3-VL text encoder with a
one-block vision tower, a character-level tokenizer with Qwen's chat tokens, a four-channel autoencoder that
downsamples by 16 (RGBA in and out, four stages), in the layout of the published folder (`processor/`)."""
from __future__ import annotations

import json
from pathlib import Path

import torch

from trainers.models.zimage.tiny import write_tiny_qwen_tokenizer

LATENT_CHANNELS = 4


def tiny_qwen21_vae(rgba: bool = True) -> "torch.nn.Module":
    """The published layout (`rgba`: RGBA in and out, four stages, no patching; the class defaults) or RGB in 2x2
    patches over three stages (12 channels in and out)."""
    from diffusers import AutoencoderKLQwenImage21

    layout = ({"dim_mult": [1] * 5, "temperal_downsample": [False] * 4} if rgba else
              {"dim_mult": [1] * 4, "temperal_downsample": [False] * 3, "in_channels": 12, "out_channels": 12,
               "patch_size": 2})
    return AutoencoderKLQwenImage21(base_dim=8, decoder_base_dim=8, z_dim=LATENT_CHANNELS, num_res_blocks=1,
                                    latents_mean=[0.1, -0.2, 0.05, 0.0], latents_std=[1.5, 2.0, 0.8, 1.2], **layout)


def tiny_qwen21_transformer() -> "torch.nn.Module":
    from diffusers import QwenImage21Transformer2DModel

    return QwenImage21Transformer2DModel(in_channels=LATENT_CHANNELS, out_channels=LATENT_CHANNELS, num_layers=2,
                                         attention_head_dim=16, num_attention_heads=2, context_in_dim=32,
                                         axes_dims_rope=(4, 6, 6))


def tiny_qwen3_vl(vocab_size: int, pad_token_id: int) -> "torch.nn.Module":
    from transformers import Qwen3VLConfig, Qwen3VLForConditionalGeneration

    text = {"vocab_size": vocab_size, "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
            "num_attention_heads": 2, "num_key_value_heads": 2, "head_dim": 16, "pad_token_id": pad_token_id,
            "rope_scaling": {"rope_type": "default", "mrope_section": [2, 3, 3], "mrope_interleaved": True}}
    vision = {"depth": 1, "hidden_size": 16, "intermediate_size": 32, "num_heads": 2, "out_hidden_size": 32,
              "deepstack_visual_indexes": []}
    return Qwen3VLForConditionalGeneration(Qwen3VLConfig(text_config=text, vision_config=vision))


def build_tiny_qwen_image21(folder: Path, seed: int = 0) -> Path:
    """Save a tiny Qwen-Image 2.1 folder to `folder`: its components, saved one by one (a QwenImage21Pipeline saves
    its Qwen3VLProcessor, whose video processor needs torchvision), and the pipeline's model_index.json."""
    import diffusers
    from diffusers import FlowMatchEulerDiscreteScheduler
    from transformers import AutoTokenizer

    from trainers.models.qwen_image21.family import QWEN_IMAGE21

    torch.manual_seed(seed)
    write_tiny_qwen_tokenizer(folder / "processor")
    tokenizer = AutoTokenizer.from_pretrained(folder / "processor")
    components = {
        "transformer": tiny_qwen21_transformer(),
        "vae": tiny_qwen21_vae(),
        "text_encoder": tiny_qwen3_vl(len(tokenizer), tokenizer.pad_token_id),
        "scheduler": FlowMatchEulerDiscreteScheduler(**QWEN_IMAGE21.scheduler_config()),
    }
    for name, component in components.items():
        component.save_pretrained(folder / name)
    index = {"_class_name": QWEN_IMAGE21.pipeline_class, "_diffusers_version": diffusers.__version__,
             "processor": ["transformers", "Qwen3VLProcessor"], "sample_sigmas": None,
             **{name: [type(c).__module__.split(".")[0], type(c).__name__] for name, c in components.items()}}
    (folder / "model_index.json").write_text(json.dumps(index, indent=2) + "\n", encoding="utf-8")
    return folder
