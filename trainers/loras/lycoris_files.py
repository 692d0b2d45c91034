"""LyCORIS files (LoHa, LoKr, IA3, full, OFT, GLoRA, DoRA, ... as `network_module = "lycoris.kohya"` trains them)
in our own Generate path.

diffusers' `load_lora_weights` reads LoRA files (lora_down/lora_up) only. A file with any other LyCORIS weights is
rebuilt module by module with the lycoris-lora package, whose modules wrap the forward of the layers they change
(the layer's output plus the module's change times its strength), under the names the trainer gave them
(lycoris_net.py): the text encoders with the `text_model.` level, an SGM-named family's UNet by its SGM names.
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

import torch
from torch import Tensor, nn

from trainers.methods.lora.lycoris_net import _classic
from trainers.methods.lora.network import _sgm_renamer, _underscored
from trainers.models import LoadedModel

# What a plain LoRA (or LoCon) module holds; diffusers loads files made of these alone.
PLAIN_LORA = frozenset({"lora_down.weight", "lora_up.weight", "alpha"})
PLAIN_SUFFIXES = tuple(f".{name}" for name in (*PLAIN_LORA, "lora_A.weight", "lora_B.weight"))


def is_lycoris_file(state: dict[str, Tensor]) -> bool:
    """The file holds weights that only LyCORIS reads (LoHa's hada_*, LoKr's lokr_*, IA3's, DoRA's dora_scale...);
    module names may have dots (a family's files in diffusers' and ComfyUI's naming, lora_file_names.py)."""
    return any(not key.endswith(PLAIN_SUFFIXES) for key in state)


def with_conv_ups(state: dict[str, Tensor]) -> dict[str, Tensor]:
    """The file's tensors with every conv layer's lora_up as (out, rank, 1, 1): lycoris-lora's DyLoRA writes it as
    (out, rank), which neither diffusers nor its own LoCon reader take."""
    fixed = dict(state)
    for key, up in state.items():
        down = state.get(key.replace(".lora_up.", ".lora_down."))
        if key.endswith(".lora_up.weight") and up.dim() == 2 and down is not None and down.dim() == 4:
            fixed[key] = up[:, :, None, None]
    return fixed


def with_one_alpha(state: dict[str, Tensor]) -> dict[str, Tensor]:
    """The same LoRA with one alpha for every module (the most common one), each module's own alpha folded into its
    lora_up. diffusers gives every attention and text-encoder layer of a kohya file the file's most common alpha, so
    a file whose alphas differ by module (a dynamic resize, a conv_alpha apart from network_alpha on the same kind of
    layer, files merged side by side) would render at the wrong strength; the scale alpha / rank stays per module."""
    alphas = {key[:-len(".alpha")]: float(value) for key, value in state.items() if key.endswith(".alpha")}
    if len(set(alphas.values())) <= 1:
        return state
    common = Counter(alphas.values()).most_common(1)[0][0]
    fixed = dict(state)
    for module, alpha in alphas.items():
        up = state.get(f"{module}.lora_up.weight")
        if alpha != common and up is not None:
            fixed[f"{module}.lora_up.weight"] = up * (alpha / common)
            fixed[f"{module}.alpha"] = torch.tensor(common, dtype=state[f"{module}.alpha"].dtype)
    return fixed


def kohya_modules(model: LoadedModel) -> dict[str, nn.Module]:
    """Every layer of the model under the module name a kohya-style file gives it (the layer itself where a LoRA
    loaded by diffusers wraps it)."""
    names: dict[str, nn.Module] = {}
    encoders = model.text_encoders
    for index, encoder in enumerate(encoders):
        prefix = "lora_te" if len(encoders) == 1 else f"lora_te{index + 1}"
        names.update((f"{prefix}_{_underscored(path)}", module) for path, module in _classic(encoder).named_modules()
                     if path)
    names.update((f"lora_unet_{_underscored(path)}", module) for path, module in _unet_paths(model))
    return {name: _unwrapped(module) for name, module in names.items()}


def _unwrapped(module: nn.Module) -> nn.Module:
    """The layer a PEFT LoRA layer (diffusers' load_lora_weights) wraps; it stays in place after the LoRA goes."""
    while isinstance(getattr(module, "base_layer", None), nn.Module):
        module = module.base_layer
    return module


def _unet_paths(model: LoadedModel) -> Iterator[tuple[str, nn.Module]]:
    """The UNet's module paths as the family's LoRA files name them (SDXL: the original SGM paths)."""
    modules = ((path, module) for path, module in model.unet.named_modules() if path)
    if model.family.unet_key_style != "sgm":
        yield from modules
        return
    rename = _sgm_renamer(model.unet)
    for path, module in modules:
        if hasattr(module, "weight"):  # the layers a file can change; containers have no SGM name of their own
            try:
                yield rename(path), module
            except ValueError:
                continue


class LycorisFile:
    """One LyCORIS file's modules wrapped around the model's layers; `weight` scales what they change."""

    def __init__(self, state: dict[str, Tensor], model: LoadedModel, device: torch.device,
                 dtype: torch.dtype) -> None:
        from lycoris.modules.base import LycorisBaseModule

        layers = kohya_modules(model)
        wanted = sorted({key.split(".")[0] for key in state if "." in key})
        unknown = [name for name in wanted if name not in layers]
        if unknown:
            raise ValueError(f"it has {len(unknown)} modules this {model.family.title} model does not have (e.g. "
                             f"{unknown[0]}): is it a LoRA of another model family?")
        self.modules = [_lycoris_module(state, name, layers[name]).to(device, dtype).eval() for name in wanted]
        for module in self.modules:
            module.requires_grad_(False)
            LycorisBaseModule.apply_to(module)  # wraps the forward; FullModule's own takes the weight off the layer

    def set_weight(self, weight: float) -> None:
        for module in self.modules:
            module.multiplier = weight

    def remove(self) -> None:
        """Give every layer back its own forward (the last wrapped is unwrapped first)."""
        from lycoris.modules.base import LycorisBaseModule

        for module in reversed(self.modules):
            LycorisBaseModule.restore(module)
        self.modules = []


def _lycoris_module(state: dict[str, Tensor], name: str, layer: nn.Module) -> nn.Module:
    from lycoris.modules import IA3Module, get_module, make_module

    if f"{name}.on_input" in state:  # lycoris-lora 4.1 passes IA3's on_input to a reader that takes no such argument
        module = IA3Module(name, layer, train_on_input=bool(state[f"{name}.on_input"]))
        module.weight.data.copy_(state[f"{name}.weight"])
        return module
    kind, params = get_module(state, name)
    module = make_module(kind, params, name, layer) if kind is not None else None
    if module is None:
        keys = sorted(k.partition(".")[2] for k in state if k.startswith(f"{name}."))
        raise ValueError(f"module {name} holds {', '.join(keys)}: weights of no LyCORIS algorithm lycoris-lora reads")
    return module
