"""Qwen-Image-Edit (diffusers QwenImageEditPipeline), as its pipeline runs it and musubi-tuner trains it: the caption in
the pipeline's edit chat template, whose `<|image_pad|>` Qwen2.5-VL reads as the control image (its vision tower's
tokens, one per 2x2 merged 14-pixel patch, as Qwen2VLProcessor expands it), the first 64 tokens dropped; the
control's latent tokens follow the noisy target's with their own img_shapes entry and their output is dropped. LoRA
files keep Qwen-Image's names (musubi-tuner's and ComfyUI's)."""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from trainers.models.base import LoadedModel
from trainers.methods.controlnet.control_images import sample_control
from trainers.models.edit import EditFamily
from trainers.models.flow import TextEncoderSpec
from trainers.models.qwen_image.family import TEXT_LENGTH, QwenImage
from trainers.models.qwen_image_edit.rules import QwenImageEditRules

# QwenImageEditPipeline's prompt_template_encode and prompt_template_encode_start_idx
EDIT_TEMPLATE = ("<|im_start|>system\nDescribe the key features of the input image (color, shape, size, texture, "
                 "objects, background), then explain how the user's text instruction should alter or modify the "
                 "image. Generate a new image that meets the user's requirements while maintaining consistency with "
                 "the original input where appropriate.<|im_end|>\n<|im_start|>user\n<|vision_start|><|image_pad|>"
                 "<|vision_end|>{}<|im_end|>\n<|im_start|>assistant\n")
EDIT_TEMPLATE_TOKENS = 64
IMAGE_PAD = "<|image_pad|>"


class QwenImageEdit(EditFamily, QwenImageEditRules, QwenImage):
    text_reads_images = True
    template_tokens = EDIT_TEMPLATE_TOKENS
    text_encoder_specs = (TextEncoderSpec("Qwen2_5_VLForConditionalGeneration", "text_encoder", "auto", "tokenizer",
                                          "Qwen2.5-VL", max_length=TEXT_LENGTH + EDIT_TEMPLATE_TOKENS,
                                          template=EDIT_TEMPLATE),)
    image_processor: Any = None  # its processor's Qwen2VLImageProcessor, set when loaded
    image_pad_id: int = -1

    def load(self, folder: Path, weight_dtype: torch.dtype, vae_path: str = "", random_init: bool = False) -> Any:
        from transformers import Qwen2VLImageProcessor

        model = super().load(folder, weight_dtype, vae_path, random_init)  # the family is the model's own copy
        model.family.image_processor = Qwen2VLImageProcessor.from_pretrained(folder, subfolder="processor")
        model.family.image_pad_id = model.tokenizers[0].convert_tokens_to_ids(IMAGE_PAD)
        return model

    def reference_latents(self) -> list[torch.Tensor]:
        return self.references()

    def with_images(self, ids: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """The control image as Qwen2VLProcessor gives it to Qwen2.5-VL: its patches, and `<|image_pad|>` repeated
        once per merged patch."""
        if not self.slot.pixels:
            return ids, {}
        images = self.slot.pixels[0]
        vision = self.image_processor(images=list(images.float().cpu()), do_rescale=False, return_tensors="pt")
        merge = self.image_processor.merge_size ** 2
        rows = []
        for row, grid in zip(ids, vision["image_grid_thw"]):
            at = int((row == self.image_pad_id).nonzero()[0])
            rows.append(torch.cat([row[:at], row.new_full((int(grid.prod()) // merge,), self.image_pad_id),
                                   row[at + 1:]]))
        longest = max(len(row) for row in rows)
        padded = torch.stack([torch.cat([row, row.new_full((longest - len(row),), self.pad_token_id)]) for row in rows])
        device = ids.device
        return padded, {"pixel_values": vision["pixel_values"].to(device), "image_grid_thw":
                        vision["image_grid_thw"].to(device)}

    def encode_with_images(self, model: LoadedModel, texts: list[str], clip_skip: int, images: Sequence[str],
                           width: int, height: int) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The prompts with the input image (at the output's size, as training fits controls) read by Qwen2.5-VL."""
        pixels = sample_control(Path(images[0]).expanduser(), width, height)
        self.slot.pixels = [pixels.expand(len(texts), -1, -1, -1)]
        try:
            return model.encode_texts(texts, clip_skip)
        finally:
            self.slot.pixels = None

    def build_pipeline(self, model: LoadedModel, scheduler: Any) -> Any:
        from diffusers import QwenImageEditPipeline

        # prompts reach it encoded (encode_with_images), so its processor, which needs torchvision, is not needed
        return QwenImageEditPipeline(scheduler=scheduler, vae=model.vae, text_encoder=model.text_encoders[0],
                                     tokenizer=model.tokenizers[0], processor=None, transformer=model.unet)


QWEN_IMAGE_EDIT = QwenImageEdit()
