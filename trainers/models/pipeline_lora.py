"""LoRA loading for a diffusers pipeline without a LoRA loader (HunyuanImagePipeline, HunyuanVideo15Pipeline): the
family's lora_for_pipeline keys go onto its transformer through PEFT's adapter methods."""
from __future__ import annotations

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
