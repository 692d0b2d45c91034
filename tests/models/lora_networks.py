"""A family's LoRA network on a tiny denoiser with random weights, as training holds it (for the tests of the files
a run saves and of the tools that read them)."""
from __future__ import annotations

from typing import Any

import torch
from torch import nn

from trainers.methods.lora.network import LoRANetwork


def random_network(family: Any, unet: nn.Module, dim: int = 4, alpha: float = 2) -> tuple[LoRANetwork, list, dict]:
    """(the network, the family's LoRA targets, its kohya state dict): every weight drawn from N(0, 0.1), seed 0."""
    torch.manual_seed(0)
    targets = family.lora_targets(unet)
    network = LoRANetwork(unet, [], unet_key_style="own", network_dim=dim, network_alpha=alpha,
                          train_text_encoder=False, unet_targets=targets,
                          target_dims=family.lora_target_dims(targets, {}, dim))
    for parameter in network.parameters():
        nn.init.normal_(parameter, std=0.1)
    return network, targets, network.kohya_state_dict(torch.float32)
