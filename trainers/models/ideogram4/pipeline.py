"""Ideogram4Pipeline as samples, Generate and the compare grid call it: with encoded prompts (the family's
encode_prompts, as training encodes captions) instead of prompt strings, and the unconditional branch run by the
trained transformer on the negative prompt (musubi-tuner's default for LoRA samples: a LoRA trains the conditional
transformer only, so the published unconditional one would not show it). Its denoising loop, schedule and guidance
are the pipeline's own."""
from __future__ import annotations

from typing import Any

import torch
from diffusers import Ideogram4Pipeline
from torch import nn

from trainers.models.ideogram4.sequence import image_positions, packed, trimmed


class NegativeBranch(nn.Module):
    """The unconditional transformer's place in the pipeline: the conditional transformer reading the negative
    prompt's text before the image tokens the pipeline gives (an image-only sequence with zeroed text)."""

    def __init__(self, transformer: nn.Module) -> None:
        super().__init__()
        self.transformer = transformer
        self.text: tuple[torch.Tensor, torch.Tensor] | None = None  # the negative prompt's features and mask

    @property
    def dtype(self) -> torch.dtype:
        return self.transformer.dtype

    @property
    def device(self) -> torch.device:
        return self.transformer.device

    @property
    def config(self) -> Any:
        return self.transformer.config

    def forward(self, hidden_states: torch.Tensor, timestep: torch.Tensor, encoder_hidden_states: torch.Tensor,
                position_ids: torch.Tensor, segment_ids: torch.Tensor, indicator: torch.Tensor,
                attention_kwargs: dict[str, Any] | None = None, return_dict: bool = False) -> tuple[torch.Tensor]:
        assert self.text is not None, "the pipeline is called with negative_prompt_embeds"
        batch = hidden_states.shape[0]
        text, mask = (t.to(hidden_states.device).expand(batch, *t.shape[1:]) for t in self.text)
        inputs = packed(text.to(hidden_states.dtype), mask, hidden_states, position_ids)
        out = self.transformer(**inputs, timestep=timestep, attention_kwargs=attention_kwargs, return_dict=False)[0]
        return (out[:, -hidden_states.shape[1]:],)


class EmbedsPipeline(Ideogram4Pipeline):
    """Ideogram4Pipeline called with prompt_embeds/prompt_mask and negative_prompt_embeds/negative_prompt_mask."""

    _given: tuple[torch.Tensor, torch.Tensor] | None = None

    def __call__(self, prompt_embeds: torch.Tensor, prompt_mask: torch.Tensor,  # type: ignore[override]
                 negative_prompt_embeds: torch.Tensor, negative_prompt_mask: torch.Tensor, **kwargs: Any) -> Any:
        text, mask = trimmed(prompt_embeds, prompt_mask)
        self._given = (text, mask)
        self.unconditional_transformer.text = trimmed(negative_prompt_embeds, negative_prompt_mask)
        return super().__call__(prompt="", max_sequence_length=text.shape[1], **kwargs)

    def encode_prompt(self, prompt: str | list[str], grid_h: int, grid_w: int, max_sequence_length: int,
                      device: torch.device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """The given features in the pipeline's packed layout (features, position ids, segments, indicator)."""
        assert self._given is not None, "the pipeline is called with prompt_embeds"
        text, mask = (t.to(device) for t in self._given)
        positions = image_positions(grid_h, grid_w, text.shape[0], device)
        inputs = packed(text.float(), mask, torch.zeros(text.shape[0], grid_h * grid_w, 1, device=device), positions)
        return inputs["encoder_hidden_states"], inputs["position_ids"], inputs["segment_ids"], inputs["indicator"]


def embeds_pipeline(model: Any, scheduler: Any) -> EmbedsPipeline:
    return EmbedsPipeline(scheduler=scheduler, vae=model.vae, text_encoder=model.text_encoders[0],
                          tokenizer=model.tokenizers[0], transformer=model.unet,
                          unconditional_transformer=NegativeBranch(model.unet))
