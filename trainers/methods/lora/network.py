"""Our own LoRA network, equivalent to kohya sd-scripts' `networks/lora.py` default LoRA.

Module selection, initialisation, scaling and key names follow kohya exactly, so the
saved files load in kohya, A1111/Forge, ComfyUI and diffusers' `load_lora_weights`.

UNet keys come in two styles: "diffusers" (SD1.x/2.x; kohya trains those on the diffusers
UNet) and "sgm" (SDXL; kohya trains it on the original Stability AI UNet, whose module
names such as `input_blocks_4_1` we compute from the diffusers UNet's config).
"""
from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor, nn

UNET_TARGETS = frozenset({"Transformer2DModel"})
UNET_CONV_TARGETS = frozenset({"ResnetBlock2D", "Downsample2D", "Upsample2D"})
TEXT_ENCODER_TARGETS = frozenset({"CLIPAttention", "CLIPSdpaAttention", "CLIPFlashAttention2", "CLIPMLP"})

UnetKeyStyle = Literal["diffusers", "sgm"]


class LoRAModule(nn.Module):
    """`org(x) + up(down(x)) * alpha / rank * multiplier`, hooked into `org_module.forward`."""

    def __init__(self, org_module: nn.Linear | nn.Conv2d, rank: int, alpha: float, multiplier: float = 1.0) -> None:
        super().__init__()
        if rank < 1:
            raise ValueError(f"LoRA rank must be >= 1, got {rank}")
        if alpha <= 0:
            raise ValueError(f"LoRA alpha must be > 0, got {alpha}")
        device = org_module.weight.device
        self.lora_down: nn.Linear | nn.Conv2d
        self.lora_up: nn.Linear | nn.Conv2d
        if isinstance(org_module, nn.Conv2d):
            self.lora_down = nn.Conv2d(
                org_module.in_channels, rank, org_module.kernel_size, org_module.stride, org_module.padding,
                bias=False, device=device,
            )
            self.lora_up = nn.Conv2d(rank, org_module.out_channels, 1, bias=False, device=device)
        else:
            self.lora_down = nn.Linear(org_module.in_features, rank, bias=False, device=device)
            self.lora_up = nn.Linear(rank, org_module.out_features, bias=False, device=device)
        nn.init.kaiming_uniform_(self.lora_down.weight, a=math.sqrt(5))
        nn.init.zeros_(self.lora_up.weight)
        self.register_buffer("alpha", torch.tensor(float(alpha), device=device))
        self.rank = rank
        self.scale = float(alpha) / rank
        self.multiplier = multiplier
        # Held in a list so the wrapped module is not registered as our child.
        self._org_module = [org_module]

    @property
    def is_spatial_conv(self) -> bool:
        """True for 3x3 (k x k) convolutions, which take conv_dim/conv_alpha (LoCon)."""
        return isinstance(self.lora_down, nn.Conv2d) and self.lora_down.kernel_size != (1, 1)

    def apply_to(self) -> None:
        if "org_forward" in self.__dict__:
            raise RuntimeError("LoRA module is already applied")
        org_module = self._org_module[0]
        self.org_forward = org_module.forward
        org_module.forward = self.forward

    def forward(self, x: Tensor) -> Tensor:
        out = self.org_forward(x)
        if not torch.is_autocast_enabled(x.device.type):
            x = x.to(self.lora_down.weight.dtype)
        lora_out = self.lora_up(self.lora_down(x)) * (self.multiplier * self.scale)
        return out + lora_out.to(out.dtype)


@dataclass(frozen=True)
class NetworkDims:
    """Rank/alpha found in a kohya LoRA file; conv_* are None when it has no 3x3 convs."""

    network_dim: int | None
    network_alpha: float | None
    conv_dim: int | None = None
    conv_alpha: float | None = None


class LoRANetwork(nn.Module):
    def __init__(
        self,
        unet: nn.Module,
        text_encoders: list[nn.Module],
        *,
        unet_key_style: UnetKeyStyle,
        network_dim: int,
        network_alpha: float,
        conv_dim: int | None = None,
        conv_alpha: float | None = None,
        train_unet: bool = True,
        train_text_encoder: bool = True,
    ) -> None:
        super().__init__()
        if not (train_unet or train_text_encoder):
            raise ValueError("LoRA network has nothing to train: train_unet and train_text_encoder are both False")
        if unet_key_style not in ("diffusers", "sgm"):
            raise ValueError(f"unet_key_style must be 'diffusers' or 'sgm', got {unet_key_style!r}")
        self.network_dim, self.network_alpha = network_dim, network_alpha
        self.conv_dim = conv_dim
        self.conv_alpha = (1.0 if conv_alpha is None else conv_alpha) if conv_dim else None  # kohya's default

        self.unet_loras = nn.ModuleDict()
        self.text_encoder_loras = nn.ModuleDict()
        if train_unet:
            rename = _sgm_renamer(unet) if unet_key_style == "sgm" else (lambda path: path)
            targets = UNET_TARGETS | UNET_CONV_TARGETS if conv_dim else UNET_TARGETS
            for path, module in _target_layers(unet, targets):
                lora = self._make_lora(module)
                if lora is not None:
                    self.unet_loras["lora_unet_" + _underscored(rename(path))] = lora
        if train_text_encoder:
            for index, encoder in enumerate(text_encoders):
                prefix = "lora_te_" if len(text_encoders) == 1 else f"lora_te{index + 1}_"
                for path, module in _target_layers(encoder, TEXT_ENCODER_TARGETS):
                    if isinstance(module, nn.Linear):
                        # transformers 5's CLIPTextModel has no `text_model.` level; kohya names always do.
                        name = prefix + _underscored("text_model." + path.removeprefix("text_model."))
                        self.text_encoder_loras[name] = LoRAModule(module, network_dim, network_alpha)

    def _make_lora(self, module: nn.Linear | nn.Conv2d) -> LoRAModule | None:
        if isinstance(module, nn.Linear) or module.kernel_size == (1, 1):
            return LoRAModule(module, self.network_dim, self.network_alpha)
        if self.conv_dim:
            assert self.conv_alpha is not None
            return LoRAModule(module, self.conv_dim, self.conv_alpha)
        return None

    def named_modules_for_kohya(self) -> list[tuple[str, LoRAModule]]:
        """(kohya name, module) for every LoRA module, UNet first."""
        return [*self.unet_loras.items(), *self.text_encoder_loras.items()]  # type: ignore[list-item]

    def apply_to(self) -> None:
        for _, lora in self.named_modules_for_kohya():
            lora.apply_to()

    def set_multiplier(self, multiplier: float) -> None:
        for _, lora in self.named_modules_for_kohya():
            lora.multiplier = multiplier

    def unet_parameters(self) -> list[nn.Parameter]:
        return list(self.unet_loras.parameters())

    def text_encoder_parameters(self) -> list[nn.Parameter]:
        return list(self.text_encoder_loras.parameters())

    def kohya_state_dict(self, dtype: torch.dtype) -> dict[str, Tensor]:
        tensors: dict[str, Tensor] = {}
        for name, lora in self.named_modules_for_kohya():
            for key, value in _kohya_tensors(name, lora).items():
                tensors[key] = value.detach().to(device="cpu", dtype=dtype).clone().contiguous()
        return tensors

    def load_kohya_state_dict(self, state_dict: Mapping[str, Tensor]) -> None:
        """Copy lora_down/lora_up weights from a kohya LoRA file (to resume training).

        Raises ValueError listing every missing/unexpected key and rank, alpha or shape mismatch.
        """
        problems = _key_problems(self._expected_keys(), set(state_dict))
        mismatches: dict[str, int] = {}  # message -> number of modules
        for name, lora in self.named_modules_for_kohya():
            for message in _module_mismatches(name, lora, state_dict):
                mismatches[message] = mismatches.get(message, 0) + 1
        problems += [f"{message} ({count} modules)" for message, count in mismatches.items()]
        if problems:
            raise ValueError("LoRA weights do not match this network:\n  " + "\n  ".join(problems))
        with torch.no_grad():
            for name, lora in self.named_modules_for_kohya():
                lora.lora_down.weight.copy_(state_dict[f"{name}.lora_down.weight"])
                lora.lora_up.weight.copy_(state_dict[f"{name}.lora_up.weight"])

    def _expected_keys(self) -> set[str]:
        return {key for name, lora in self.named_modules_for_kohya() for key in _kohya_tensors(name, lora)}

    @staticmethod
    def dims_from_state_dict(state_dict: Mapping[str, Tensor]) -> NetworkDims:
        """Read rank/alpha (and conv rank/alpha for LoCon files) from a kohya LoRA state dict."""
        found: dict[bool, set[tuple[int, float]]] = {False: set(), True: set()}  # is 3x3 conv -> {(rank, alpha)}
        for key, down in state_dict.items():
            if key.endswith(".lora_down.weight"):
                name = key.removesuffix(".lora_down.weight")
                alpha_tensor = state_dict.get(f"{name}.alpha")
                alpha = float(alpha_tensor) if alpha_tensor is not None else float(down.shape[0])  # kohya: alpha = rank
                is_conv = down.dim() == 4 and tuple(down.shape[2:]) != (1, 1)
                found[is_conv].add((down.shape[0], round(alpha, 4)))
        for is_conv, values in found.items():
            if len(values) > 1:
                kind = "3x3 conv" if is_conv else "linear"
                raise ValueError(f"LoRA file has mixed {kind} ranks/alphas {sorted(values)}; expected a single one")
        (dim, alpha), (conv_dim, conv_alpha) = (next(iter(found[c]), (None, None)) for c in (False, True))
        return NetworkDims(dim, alpha, conv_dim, conv_alpha)


def _underscored(path: str) -> str:
    return path.replace(".", "_")


def _target_layers(root: nn.Module, target_classes: frozenset[str]) -> Iterator[tuple[str, nn.Linear | nn.Conv2d]]:
    """Linear/Conv2d layers inside modules whose class name is targeted, as kohya selects them."""
    seen: set[str] = set()
    for name, module in root.named_modules():
        if type(module).__name__ not in target_classes:
            continue
        for child_name, child in module.named_modules():
            path = f"{name}.{child_name}" if name else child_name
            if isinstance(child, (nn.Linear, nn.Conv2d)) and path not in seen:
                seen.add(path)
                yield path, child


def _sgm_renamer(unet: nn.Module) -> Callable[[str], str]:
    """Map diffusers UNet module paths to original SGM (LDM) paths, with the full-model converter's table."""
    from trainers.models.convert import ConversionError, unet_to_ldm_key

    config = getattr(unet, "config")

    def rename(path: str) -> str:
        try:  # the converter names weights; a module's name is its weight's without ".weight"
            return unet_to_ldm_key(path + ".weight", config).removesuffix(".weight")
        except ConversionError as err:
            raise ValueError(f"no SGM name known for UNet module {path!r}: {err}") from None

    return rename


def _kohya_tensors(name: str, lora: LoRAModule) -> dict[str, Tensor]:
    return {
        f"{name}.lora_down.weight": lora.lora_down.weight,
        f"{name}.lora_up.weight": lora.lora_up.weight,
        f"{name}.alpha": lora.alpha,
    }


def _preview(keys: set[str], limit: int = 5) -> str:
    ordered = sorted(keys)
    more = f" ... and {len(ordered) - limit} more" if len(ordered) > limit else ""
    return ", ".join(ordered[:limit]) + more


def _key_problems(expected: set[str], present: set[str]) -> list[str]:
    problems = []
    if missing := expected - present:
        problems.append(f"{len(missing)} keys missing from the file: {_preview(missing)}")
    if unexpected := present - expected:
        problems.append(f"{len(unexpected)} unexpected keys in the file: {_preview(unexpected)}")
    return problems


def _module_mismatches(name: str, lora: LoRAModule, state_dict: Mapping[str, Tensor]) -> Iterator[str]:
    """Rank, alpha and shape mismatches of one module against the file; messages are shared across modules."""
    dim_option, alpha_option = ("conv_dim", "conv_alpha") if lora.is_spatial_conv else ("network_dim", "network_alpha")
    down, up, alpha = (state_dict.get(key) for key in _kohya_tensors(name, lora))
    if down is not None and down.shape[0] != lora.rank:
        yield f"{dim_option} {lora.rank} in config but the file has rank {down.shape[0]}"
        return
    for key, tensor, param in ((".lora_down.weight", down, lora.lora_down.weight),
                               (".lora_up.weight", up, lora.lora_up.weight)):
        if tensor is not None and tensor.shape != param.shape:
            yield f"{name}{key}: shape {tuple(tensor.shape)} in the file, {tuple(param.shape)} expected"
    if alpha is not None and not math.isclose(float(alpha), float(lora.alpha), rel_tol=1e-2):
        yield f"{alpha_option} {float(lora.alpha):g} in config but the file has alpha {float(alpha):g}"
