"""base_weights: LoRA files merged into the model's weights before training (sd-scripts' --base_weights)."""
from __future__ import annotations

from pathlib import Path

import torch
from safetensors import SafetensorError

from trainers.core.errors import ConfigError, ConfigIssue
from trainers.core.fsio import read_safetensors_header
from trainers.methods.lora.file_format import read_lora_file
from trainers.methods.lora.network import LoRANetwork
from trainers.models import LoadedModel
from trainers.models.pending_encoders import read_pending


def _bad(message: str) -> ConfigError:
    return ConfigError([ConfigIssue("base_weights", message, "network")])


@torch.no_grad()
def merge_base_weights(model: LoadedModel, files: list[str], multipliers: list[float]) -> list[str]:
    """Add each file's `multiplier * up @ down * alpha / rank` to the weights it names; returns what was merged."""
    merged = []
    for index, file in enumerate(files):
        path = Path(file).expanduser()
        multiplier = multipliers[index] if index < len(multipliers) else 1.0
        try:
            read_safetensors_header(path, whole=True)  # a cut file is named as such, before safetensors reads it
            state, _ = read_lora_file(path)
        except (OSError, ValueError, SafetensorError) as err:
            raise _bad(f"cannot read {path}: {err}") from None
        dims = LoRANetwork.modules_dim_from_state_dict(state)
        if not dims:
            raise _bad(f"{path} holds no lora_down/lora_up weights (a LyCORIS LoHa/LoKr/... file?): only LoRA and "
                       "LoCon files can be merged")
        if any(n.startswith("lora_te") for n in dims):
            read_pending(model.text_encoders)  # their layers are merged into: deferred encoders are read
        network = LoRANetwork(model.unet, model.text_encoders, unet_key_style=model.family.unet_key_style,
                              network_dim=1, network_alpha=1.0, modules_dim=dims,
                              train_unet=any(n.startswith("lora_unet_") for n in dims),
                              train_text_encoder=any(n.startswith("lora_te") for n in dims))
        found = dict(network.named_modules_for_kohya())
        unknown = sorted(set(dims) - set(found))
        if unknown:
            raise _bad(f"{path} has {len(unknown)} modules this {model.family.title} model does not have (e.g. "
                       f"{unknown[0]}): is it a LoRA of another model family?")
        try:
            network.load_kohya_state_dict({k: v for k, v in state.items() if k.split(".")[0] in found})
        except ValueError as err:  # a module of the right name but other shapes: another model's LoRA
            raise _bad(f"{path} does not fit this {model.family.title} model (is it a LoRA of another model?): "
                       f"{err}") from None
        for lora in found.values():
            target = lora._org_module[0].weight
            target.add_((lora.update_weight() * multiplier).to(target.device, target.dtype))
        merged.append(f"{path.name} x {multiplier:g}")
    return merged
