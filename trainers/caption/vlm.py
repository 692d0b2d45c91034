"""Natural-language captioners through transformers: Florence-2, Qwen2.5-VL, JoyCaption (a LLaVA model) and BLIP.

Each is its model class and processor from the model's folder; a batch of images goes through `generate` at once
(greedy unless num_beams > 1) and comes back as one caption per image.
"""
from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

from PIL import Image

from trainers.caption.options import TEMPLATES, JobConfig
from trainers.tools.job import ToolError

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
        if cfg.captioner == "qwen2_5_vl" and importlib.util.find_spec("torchvision") is None:
            raise ToolError("captioner", "Qwen2.5-VL's processor loads its video processor, which needs torchvision "
                                         "(not installed with Atelier): install the torchvision release made for "
                                         "your torch, or pick florence2 or joycaption")
        model_class = getattr(transformers, MODEL_CLASSES[cfg.captioner])
        try:
            self.processor = transformers.AutoProcessor.from_pretrained(folder)
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
