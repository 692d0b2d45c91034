"""LyCORIS networks (`network_module = "lycoris.kohya"`) through the lycoris-lora package, named as kohya names them.

The package builds its modules (LoHa, LoKr, IA3, full, DoRA, OFT, ...) from the module paths of the models it is
given. Two things differ on our models from sd-scripts' own, and would give files other tools load only in part:
transformers 5 dropped the `text_model.` level of CLIPTextModel (kohya keys have it), and an SGM-named family's
(SDXL's) UNet is a diffusers one here. So the text encoders are handed over seen with that level, and UNet module
names are renamed to the SGM ones before the modules are attached.
"""
from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
from torch import Tensor, nn

from trainers.methods.lora.network import _sgm_renamer, _underscored

# lycoris-lora 4.1 also targets "TimestepEmbedding" blocks (for another model); on a diffusers UNet that is the
# time embedding it already targets by name (time_embedding.linear_1/2), and the duplicate names fail its check.
_CLASHING_TARGETS = ("TimestepEmbedding",)


class ClassicNames(nn.Module):
    """A text encoder seen with the `text_model.` level in its module paths (the wrapped module is shared)."""

    def __init__(self, encoder: nn.Module) -> None:
        super().__init__()
        self.text_model = encoder


def _classic(encoder: nn.Module) -> nn.Module:
    return encoder if hasattr(encoder, "text_model") else ClassicNames(encoder)


@contextlib.contextmanager
def _without_clashing_targets() -> Iterator[None]:
    from lycoris.kohya import LycorisNetworkKohya

    original = LycorisNetworkKohya.__dict__["apply_preset"]

    def apply_preset(cls: Any, preset: Any) -> Any:
        cls = original.__func__(cls, preset)
        cls.UNET_TARGET_REPLACE_MODULE = [m for m in cls.UNET_TARGET_REPLACE_MODULE if m not in _CLASHING_TARGETS]
        return cls

    LycorisNetworkKohya.apply_preset = classmethod(apply_preset)
    try:
        yield
    finally:
        LycorisNetworkKohya.apply_preset = original


class LycorisNetwork(nn.Module):
    """A lycoris.kohya network attached to the model, with the interface the LoRA method uses."""

    def __init__(self, unet: nn.Module, text_encoders: list[nn.Module], vae: nn.Module, *, unet_key_style: str,
                 network_dim: int, network_alpha: float, kwargs: dict[str, str], train_unet: bool,
                 train_text_encoder: bool) -> None:
        super().__init__()
        from lycoris import kohya

        encoders = [_classic(te) for te in text_encoders]
        te_arg: Any = encoders if len(encoders) > 1 else encoders[0]
        with _without_clashing_targets():
            self.inner = kohya.create_network(1.0, network_dim, network_alpha, vae, te_arg, unet, **kwargs)
        if unet_key_style == "sgm":
            self._rename_unet(unet)
        self.inner.apply_to(te_arg, unet, apply_text_encoder=train_text_encoder, apply_unet=train_unet)

    def _rename_unet(self, unet: nn.Module) -> None:
        rename = _sgm_renamer(unet)
        paths = {"lora_unet_" + _underscored(path): path for path, _ in unet.named_modules() if path}
        for lora in self.inner.unet_loras:
            if lora.lora_name not in paths:
                raise ValueError(f"LyCORIS module {lora.lora_name} is no UNet module path; train this family with "
                                 "networks.lora")
            lora.lora_name = "lora_unet_" + _underscored(rename(paths[lora.lora_name]))

    def named_modules_for_kohya(self) -> list[tuple[str, nn.Module]]:
        return [(m.lora_name, m) for m in [*self.inner.text_encoder_loras, *self.inner.unet_loras]]

    def set_multiplier(self, multiplier: float) -> None:
        self.inner.set_multiplier(multiplier)

    def kohya_state_dict(self, dtype: torch.dtype) -> dict[str, Tensor]:
        return {k: v.detach().to(device="cpu", dtype=dtype if v.is_floating_point() else v.dtype).clone().contiguous()
                for k, v in self.inner.state_dict().items()}

    def load_kohya_state_dict(self, state_dict: dict[str, Tensor]) -> None:
        missing, unexpected = self.inner.load_state_dict(state_dict, strict=False)
        if missing or unexpected:
            raise ValueError(f"LyCORIS weights do not match this network: {len(missing)} keys missing (e.g. "
                             f"{missing[:2]}), {len(unexpected)} unexpected (e.g. {unexpected[:2]}); use the same "
                             "algo, preset and dims as the file")

    def max_norm_regularize(self, max_norm: float) -> tuple[int, float, float]:
        device = next(self.parameters()).device
        scaled, mean, top = self.inner.apply_max_norm_regularization(max_norm, device)
        return int(scaled), float(mean), float(top)
