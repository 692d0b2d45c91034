"""Options: The network a LoRA method trains (rank, alpha, LoCon, what it trains)."""
from __future__ import annotations

from trainers.core.options.method_sets import LORA
from trainers.core.options.schema import Option

OPTIONS: tuple[Option, ...] = (
    Option("network_dim", "int", 16, "LoRA rank: higher learns more detail, makes bigger files.", "network",
           methods=LORA, min=1, max=1024),
    Option("network_alpha", "float", 8.0, "LoRA alpha: the update is scaled by alpha / dim (0 means alpha = dim).",
           "network", methods=LORA, min=0),
    Option("conv_dim", "int", None, "Rank for the ResNet 3x3 convolutions (LoCon); unset to leave them alone.",
           "network", methods=LORA, min=1, max=1024, nullable=True, advanced=True),
    Option("conv_alpha", "float", None, "Alpha for the LoCon convolutions (default: conv_dim).", "network",
           methods=LORA, min=0, nullable=True, advanced=True),
    Option("network_weights", "str", "", "Start from the weights of an existing LoRA file (same rank).", "network",
           methods=LORA, path="file", advanced=True),
    Option("network_train_unet_only", "bool", False, "Train the UNet LoRA only (text encoder untouched).",
           "network", methods=LORA),
    Option("network_train_text_encoder_only", "bool", False, "Train the text-encoder LoRA only.", "network",
           methods=LORA, advanced=True),
)
