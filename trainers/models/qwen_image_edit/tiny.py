"""A tiny random-init Qwen-Image-Edit pipeline (tests): tiny Qwen-Image's transformer and VAE, its Qwen2.5-VL with a
one-block vision tower, a character-level tokenizer with Qwen's chat and vision tokens, and the processor's image
processor."""
from __future__ import annotations

from pathlib import Path

import torch

from trainers.models.qwen_image.tiny import tiny_qwen_denoiser, tiny_qwen_vae, tiny_qwen_vl
from trainers.models.zimage.tiny import write_tiny_qwen_tokenizer

VISION_TOKENS = ("<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>")


def build_tiny_qwen_image_edit(folder: Path, seed: int = 0, pipeline_class: str = "QwenImageEditPipeline") -> Path:
    """Save a tiny QwenImageEditPipeline (or QwenImageEditPlusPipeline: the same modules) to `folder`."""
    import diffusers
    from transformers import AutoTokenizer, Qwen2VLImageProcessor

    torch.manual_seed(seed)
    write_tiny_qwen_tokenizer(folder / "tokenizer")
    tokenizer = AutoTokenizer.from_pretrained(folder / "tokenizer")
    tokenizer.add_tokens(list(VISION_TOKENS), special_tokens=True)
    tokenizer.save_pretrained(folder / "tokenizer")
    ids = dict(zip(("vision_start_token_id", "vision_end_token_id", "image_token_id", "video_token_id"),
                   tokenizer.convert_tokens_to_ids(list(VISION_TOKENS))))
    transformer, scheduler = tiny_qwen_denoiser()
    pipe = getattr(diffusers, pipeline_class)(scheduler=scheduler, vae=tiny_qwen_vae(),
                                 text_encoder=tiny_qwen_vl(len(tokenizer), tokenizer.pad_token_id, **ids),
                                 tokenizer=tokenizer, processor=None, transformer=transformer)
    pipe.save_pretrained(folder)
    # the processor's image half, which is what training reads (its Qwen2VLProcessor needs torchvision's video one)
    Qwen2VLImageProcessor().save_pretrained(folder / "processor")
    return folder
