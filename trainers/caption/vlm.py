"""Natural-language captioners through transformers: Florence-2, Qwen2.5-VL, JoyCaption (a LLaVA model) and BLIP.

Each is its model class and processor from the model's folder; a batch of images goes through `generate` at once
(greedy unless num_beams > 1) and comes back as one caption per image.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from PIL import Image

from trainers.caption.options import TEMPLATES, JobConfig
from trainers.core.errors import ToolError

FLORENCE_TASKS = {"short": "<CAPTION>", "detailed": "<DETAILED_CAPTION>", "prompt": "<MORE_DETAILED_CAPTION>",
                  "tags": "<MORE_DETAILED_CAPTION>"}
CHAT = ("qwen2_5_vl", "joycaption")  # asked through their chat template; BLIP's prompt is the caption's start
JOYCAPTION_SYSTEM = "You are a helpful image captioner."
MODEL_CLASSES = {"florence2": "Florence2ForConditionalGeneration", "blip": "BlipForConditionalGeneration",
                 "qwen2_5_vl": "Qwen2_5_VLForConditionalGeneration", "joycaption": "LlavaForConditionalGeneration"}


def instruction(cfg: JobConfig) -> str:
    """What the model is asked: the custom prompt ({trigger} filled in) or the template's text."""
    if cfg.prompt.strip():
        return cfg.prompt.replace("{trigger}", cfg.trigger_word.strip()).strip()
    if cfg.captioner == "florence2":
        return FLORENCE_TASKS[cfg.prompt_template]
    return "" if cfg.captioner == "blip" else TEMPLATES[cfg.prompt_template]


class Captioner:
    def __init__(self, folder: Path, cfg: JobConfig, device: Any, dtype: Any) -> None:
        import transformers

        self.cfg, self.device, self.dtype = cfg, device, dtype
        model_class = getattr(transformers, MODEL_CLASSES[cfg.captioner])
        try:
            self.processor = (QwenImageProcessor(folder) if cfg.captioner == "qwen2_5_vl"
                              else transformers.AutoProcessor.from_pretrained(folder))
            self.model = model_class.from_pretrained(folder, dtype=dtype).to(device).eval()
        except (OSError, ValueError, KeyError) as err:
            raise ToolError("model", f"{folder} does not load as {model_class.__name__} ({cfg.captioner}): {err}. "
                                     "Give a model of that class, or pick the captioner that matches it") from None
        tokenizer = getattr(self.processor, "tokenizer", None)
        if tokenizer is not None and cfg.captioner in CHAT:
            tokenizer.padding_side = "left"  # decoder-only models continue the prompt: pad before it in a batch
        self.instruction = instruction(cfg)
        self.chat_prompt = self._chat_prompt() if cfg.captioner in CHAT else ""

    def _inputs(self, images: list[Image.Image]) -> Any:
        text: Any = None
        if self.cfg.captioner in CHAT:
            text = [self.chat_prompt] * len(images)
        elif self.instruction:
            text = [self.instruction] * len(images)
        inputs = self.processor(images=images, text=text, return_tensors="pt", padding=text is not None)
        return inputs.to(self.device)

    def _chat_prompt(self) -> str:
        """The chat template's text for one image and the instruction. As JoyCaption's own example does, the
        instruction is given as text first; a template that then places no image token is given the image as a
        content part (Qwen2.5-VL's way)."""
        system = [{"role": "system", "content": JOYCAPTION_SYSTEM}] if self.cfg.captioner == "joycaption" else []
        for content in (self.instruction, [{"type": "image"}, {"type": "text", "text": self.instruction}]):
            text = self.processor.apply_chat_template([*system, {"role": "user", "content": content}],
                                                      tokenize=False, add_generation_prompt=True)
            if getattr(self.processor, "image_token", None) in text:
                break
        return text

    def __call__(self, images: list[Image.Image]) -> list[str]:
        import torch

        inputs = self._inputs(images)
        if "pixel_values" in inputs:
            inputs["pixel_values"] = inputs["pixel_values"].to(self.dtype)
        with torch.inference_mode():
            out = self.model.generate(**inputs, max_new_tokens=self.cfg.max_new_tokens, num_beams=self.cfg.num_beams,
                                      do_sample=False)
        if self.cfg.captioner in CHAT:
            out = out[:, inputs["input_ids"].shape[1]:]  # the chat prompt comes back first
        texts = self.processor.batch_decode(out, skip_special_tokens=True)
        return [" ".join(t.split()) for t in texts]


class QwenImageProcessor:
    """Qwen2.5-VL's processor for images alone, without torchvision: transformers' Qwen2_5_VLProcessor also loads a
    video processor, which needs torchvision (not installed with Atelier: its wheels on the package index are CUDA
    builds that do not import beside a CPU torch). This one is that processor's image path: transformers' PIL image
    processor for pixel_values and image_grid_thw, each image's placeholder expanded to one token per merged patch,
    and the image tokens marked in mm_token_type_ids (the model's 3-D positions)."""

    image_token = "<|image_pad|>"

    def __init__(self, folder: Path) -> None:
        import transformers

        self.image_processor = transformers.AutoImageProcessor.from_pretrained(folder, backend="pil")
        self.tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
        self.chat_template = _chat_template(folder) or self.tokenizer.chat_template
        self.image_token_id = self.tokenizer.convert_tokens_to_ids(self.image_token)

    def apply_chat_template(self, messages: list[dict], **kwargs: Any) -> str:
        return self.tokenizer.apply_chat_template(messages, chat_template=self.chat_template, **kwargs)

    def __call__(self, images: list[Image.Image], text: list[str], return_tensors: str = "pt", **_: Any) -> Any:
        from transformers import BatchFeature

        pixels = self.image_processor(images=images, return_tensors=return_tensors)
        merged = self.image_processor.merge_size ** 2
        texts = [t.replace(self.image_token, self.image_token * int(grid.prod() // merged), 1)
                 for t, grid in zip(text, pixels["image_grid_thw"])]
        tokens = self.tokenizer(texts, return_tensors=return_tensors, padding=True)
        tokens["mm_token_type_ids"] = (tokens["input_ids"] == self.image_token_id).int()
        return BatchFeature({**tokens, **pixels})

    def batch_decode(self, ids: Any, **kwargs: Any) -> list[str]:
        return self.tokenizer.batch_decode(ids, **kwargs)


def _chat_template(folder: Path) -> str | None:
    """The chat template a model folder ships beside its processor (chat_template.jinja, or the older .json)."""
    jinja, old = folder / "chat_template.jinja", folder / "chat_template.json"
    if jinja.is_file():
        return jinja.read_text(encoding="utf-8")
    if old.is_file():
        return json.loads(old.read_text(encoding="utf-8")).get("chat_template")
    return None
