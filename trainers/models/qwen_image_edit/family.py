"""Qwen-Image-Edit (diffusers QwenImageEditPipeline) and Edit-2509/2511 (QwenImageEditPlusPipeline), as their
pipelines run them and musubi-tuner trains them: the caption in the pipeline's edit chat template, where Qwen2.5-VL
reads the control images (their vision tower's tokens, one per 2x2 merged 14-pixel patch, as Qwen2VLProcessor expands
`<|image_pad|>`), the first 64 tokens dropped; each control's latent tokens follow the noisy target's with their own
img_shapes entry and their output is dropped. LoRA files keep Qwen-Image's names (musubi-tuner's and ComfyUI's)."""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from trainers.data.control_images import sample_control
from trainers.models.base import LoadedModel
from trainers.models.edit import EditFamily
from trainers.models.edit_texts import reading_images
from trainers.models.flow import TextEncoderSpec
from trainers.models.qwen_image.family import TEXT_LENGTH, QwenImage
from trainers.models.qwen_image_edit.rules import QwenImageEditPlusRules, QwenImageEditRules

IMAGE_PAD, VISION_START, VISION_END = "<|image_pad|>", "<|vision_start|>", "<|vision_end|>"
# The edit pipelines' prompt_template_encode with IMAGE_PAD where their images' tokens go (QwenImageEditPipeline:
# `<|vision_start|><|image_pad|><|vision_end|>` there; QwenImageEditPlusPipeline: `Picture 1: ` and those three for
# each image), and their prompt_template_encode_start_idx
EDIT_TEMPLATE = ("<|im_start|>system\nDescribe the key features of the input image (color, shape, size, texture, "
                 "objects, background), then explain how the user's text instruction should alter or modify the "
                 "image. Generate a new image that meets the user's requirements while maintaining consistency with "
                 "the original input where appropriate.<|im_end|>\n<|im_start|>user\n" + IMAGE_PAD +
                 "{}<|im_end|>\n<|im_start|>assistant\n")
EDIT_TEMPLATE_TOKENS = 64
CONDITION_AREA = 384 * 384  # QwenImageEditPlusPipeline's CONDITION_IMAGE_SIZE: the area Qwen2.5-VL reads each image at


class QwenImageEdit(EditFamily, QwenImageEditRules, QwenImage):
    text_reads_images = True
    template_tokens = EDIT_TEMPLATE_TOKENS
    text_encoder_specs = (TextEncoderSpec("Qwen2_5_VLForConditionalGeneration", "text_encoder", "auto", "tokenizer",
                                          "Qwen2.5-VL", max_length=TEXT_LENGTH + EDIT_TEMPLATE_TOKENS,
                                          template=EDIT_TEMPLATE),)
    picture_label = ""  # before each image's tokens (Edit-Plus: "Picture {}: ")
    condition_area: int | None = None  # the area Qwen2.5-VL reads each image at (None: as the transformer does)
    image_processor: Any = None  # its processor's Qwen2VLImageProcessor, set when loaded
    token_ids: dict[str, int] = {}  # IMAGE_PAD's, VISION_START's and VISION_END's, set when loaded
    label_ids: list[list[int]] = []  # each image's picture_label, tokenized when loaded

    def load(self, folder: Path, weight_dtype: torch.dtype, vae_path: str = "", random_init: bool = False) -> Any:
        from transformers import Qwen2VLImageProcessor

        model = super().load(folder, weight_dtype, vae_path, random_init)  # the family is the model's own copy
        model.family.image_processor = Qwen2VLImageProcessor.from_pretrained(folder, subfolder="processor")
        tokenizer = model.tokenizers[0]
        model.family.token_ids = {t: tokenizer.convert_tokens_to_ids(t) for t in (IMAGE_PAD, VISION_START, VISION_END)}
        model.family.label_ids = [tokenizer(self.picture_label.format(i + 1), add_special_tokens=False).input_ids
                                  if self.picture_label else [] for i in range(self.max_controls)]
        return model

    def reference_latents(self) -> list[torch.Tensor]:
        return self.references()

    def with_images(self, ids: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """The controls as the pipeline's Qwen2VLProcessor gives them to Qwen2.5-VL: their patches, and in the
        template's image place each image's label, `<|vision_start|>`, `<|image_pad|>` once per merged patch and
        `<|vision_end|>`."""
        pad = self.token_ids[IMAGE_PAD]
        if not self.slot.pixels:
            return torch.stack([torch.cat([row[row != pad], row.new_full((1,), self.pad_token_id)]) for row in ids]), {}
        references = [self._for_vision(pixels.float().cpu()) for pixels in self.slot.pixels]
        images = [refs[row] for row in range(ids.shape[0]) for refs in references]  # each row's images in order
        vision = self.image_processor(images=images, do_rescale=False, return_tensors="pt")
        grids = vision["image_grid_thw"].view(ids.shape[0], len(references), 3)
        merge = self.image_processor.merge_size ** 2
        rows = []
        for row, row_grids in zip(ids, grids):
            at = int((row == pad).nonzero()[0])
            blocks = [torch.tensor([*self.label_ids[i], self.token_ids[VISION_START],
                                    *[pad] * (int(grid.prod()) // merge), self.token_ids[VISION_END]],
                                   dtype=row.dtype) for i, grid in enumerate(row_grids)]
            rows.append(torch.cat([row[:at], *blocks, row[at + 1:]]))
        longest = max(len(row) for row in rows)
        padded = torch.stack([torch.cat([row, row.new_full((longest - len(row),), self.pad_token_id)]) for row in rows])
        device = ids.device
        return padded, {"pixel_values": vision["pixel_values"].to(device), "image_grid_thw":
                        vision["image_grid_thw"].to(device)}

    def _for_vision(self, pixels: torch.Tensor) -> torch.Tensor:
        """Images (B, 3, H, W) at the size Qwen2.5-VL reads them: the condition area's, in multiples of 32, as
        QwenImageEditPlusPipeline's calculate_dimensions (bilinear here)."""
        if self.condition_area is None:
            return pixels
        ratio = pixels.shape[-1] / pixels.shape[-2]
        width = max(32, round((self.condition_area * ratio) ** 0.5 / 32) * 32)
        height = max(32, round((self.condition_area / ratio) ** 0.5 / 32) * 32)
        return torch.nn.functional.interpolate(pixels, size=(height, width), mode="bilinear", antialias=True)

    def encode_with_images(self, model: LoadedModel, texts: list[str], clip_skip: int, images: Sequence[str],
                           width: int, height: int) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The prompts with the input images (at the output's size, as training fits controls) read by Qwen2.5-VL."""
        self.slot.pixels = [sample_control(Path(path).expanduser(), width, height).expand(len(texts), -1, -1, -1)
                            for path in images[:self.max_controls]]
        try:
            with reading_images(model) as fresh:
                return fresh.encode_texts(texts, clip_skip)
        finally:
            self.slot.pixels = None

    def build_pipeline(self, model: LoadedModel, scheduler: Any) -> Any:
        import diffusers

        # prompts reach it encoded (encode_with_images), so its processor, which needs torchvision, is not needed
        pipeline = getattr(diffusers, self.pipeline_class)
        return pipeline(scheduler=scheduler, vae=model.vae, text_encoder=model.text_encoders[0],
                        tokenizer=model.tokenizers[0], processor=None, transformer=model.unet)


class QwenImageEditPlus(QwenImageEditPlusRules, QwenImageEdit):
    """Qwen-Image-Edit-2509/2511 (QwenImageEditPlusPipeline): up to three references, each labelled `Picture n: ` in
    the caption's template and read by Qwen2.5-VL at 384x384 pixels' area."""

    picture_label = "Picture {}: "
    condition_area = CONDITION_AREA


QWEN_IMAGE_EDIT = QwenImageEdit()
QWEN_IMAGE_EDIT_PLUS = QwenImageEditPlus()
