"""LoRA loading for a diffusers pipeline without a LoRA loader (HunyuanImagePipeline, HunyuanVideo15Pipeline): the
family's lora_for_pipeline keys go onto its transformer through PEFT's adapter methods. And what a LoRA line loads
into a pipeline of several denoisers (`PipelinePart`: Wan 2.2 A14B's two experts)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch


class TransformerLoraLoading:
    """Mixed in before the pipeline class: the pipeline's LoRA methods as its transformer's."""

    transformer: Any

    def load_lora_weights(self, state: dict[str, torch.Tensor], adapter_name: str | None = None) -> None:
        """lora_for_pipeline's `transformer.` keys into the transformer."""
        self.transformer.load_lora_adapter(state, prefix="transformer", adapter_name=adapter_name)

    def set_adapters(self, adapter_names: list[str], adapter_weights: list[float] | None = None) -> None:
        self.transformer.set_adapters(adapter_names, adapter_weights)

    def delete_adapters(self, adapter_names: list[str] | str) -> None:
        self.transformer.delete_adapters(adapter_names)


@dataclass(frozen=True)
class PipelinePart:
    """What one LoRA line of Generate loads into its pipeline: a file, or one denoiser's part of it, with the keyword
    arguments of load_lora_weights that put it on its denoiser (a model of one denoiser: the whole file, none)."""

    path: Path
    load_kwargs: tuple[tuple[str, Any], ...] = ()

    def own_keys(self, state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """The part's keys of the file (in the family's kohya names), as the loaded model's lora_targets name them:
        what the shape check reads."""
        return state

    def pipeline_keys(self, state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """own_keys' result as the family's lora_for_pipeline takes it for the part's denoiser."""
        return state
