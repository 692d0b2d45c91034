"""Our own LoRA network, equivalent to kohya sd-scripts' `networks/lora.py` default LoRA.

Module selection, initialisation, scaling and key names follow kohya exactly, so the
saved files load in kohya, A1111/Forge, ComfyUI and diffusers' `load_lora_weights`.

UNet keys come in two styles: "diffusers" (SD1.x/2.x; kohya trains those on the diffusers
UNet) and "sgm" (SDXL; kohya trains it on the original Stability AI UNet, whose module
names such as `input_blocks_4_1` we compute from the diffusers UNet's config).
"""
from __future__ import annotations

import math
import weakref
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor, nn

from trainers.methods.lora.blocks import block_index
from trainers.models.base import LoraTarget

UNET_TARGETS = frozenset({"Transformer2DModel"})
UNET_CONV_TARGETS = frozenset({"ResnetBlock2D", "Downsample2D", "Upsample2D"})
TEXT_ENCODER_TARGETS = frozenset({"CLIPAttention", "CLIPSdpaAttention", "CLIPFlashAttention2", "CLIPMLP"})

UnetKeyStyle = Literal["diffusers", "sgm", "own"]  # "own": the family names its modules (LoraTarget)


@dataclass(frozen=True)
class Dropouts:
    """kohya's three dropouts, while training only: of the inner activations (`neuron`), of whole ranks (scaled
    so the expected output is the same) and of the whole module."""

    neuron: float | None = None
    rank: float | None = None
    module: float | None = None


class LoRAModule(nn.Module):
    """`org(x) + up(down(x)) * alpha / rank * multiplier`, hooked into `org_module.forward`."""

    def __init__(self, org_module: nn.Linear | nn.Conv2d, rank: int, alpha: float, multiplier: float = 1.0,
                 dropouts: Dropouts = Dropouts()) -> None:
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
        self.dropouts = dropouts
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
        drop = self.dropouts
        if self.training and drop.module and torch.rand(1) < drop.module:
            return out
        if not torch.is_autocast_enabled(x.device.type):
            x = x.to(self.lora_down.weight.dtype)
        inner = self.lora_down(x)
        scale = self.scale
        if self.training and drop.neuron:
            inner = torch.nn.functional.dropout(inner, p=drop.neuron)
        if self.training and drop.rank:
            keep = (torch.rand((inner.size(0), self.rank), device=inner.device) > drop.rank).to(inner.dtype)
            if inner.dim() == 3:  # (batch, tokens, rank)
                keep = keep.unsqueeze(1)
            elif inner.dim() == 4:  # (batch, rank, height, width)
                keep = keep[:, :, None, None]
            inner = inner * keep
            scale = scale / (1.0 - drop.rank)
        lora_out = self.lora_up(inner)
        if lora_out.dtype != out.dtype:
            lora_out = lora_out.to(out.dtype)
        return torch.add(out, lora_out, alpha=self.multiplier * scale)  # one fused kernel: scale and add

    def saved_up(self) -> Tensor:
        """The up weight as a LoRA file holds it."""
        return self.lora_up.weight

    def update_weight(self) -> Tensor:
        """The weight change this module adds, `up @ down * alpha / rank` (for max-norm and merging)."""
        up, down = self.saved_up(), self.lora_down.weight
        if down.dim() == 2:
            delta = up @ down
        elif down.shape[2:] == (1, 1):
            delta = (up.flatten(1) @ down.flatten(1)).unsqueeze(2).unsqueeze(3)
        else:
            delta = torch.nn.functional.conv2d(down.permute(1, 0, 2, 3), up).permute(1, 0, 2, 3)
        return delta * self.scale


class FusedLoRAModule(LoRAModule):
    """One kohya module over several layers that read the same input (q, k and v, or FLUX's q, k, v and MLP input):
    one down, and one up whose rows are the layers' outputs stacked in the file's order, as sd-scripts trains the
    fused layer of the reference implementation. Dropouts are drawn once for all of them."""

    def __init__(self, target: LoraTarget, rank: int, alpha: float, multiplier: float = 1.0,
                 dropouts: Dropouts = Dropouts()) -> None:
        nn.Module.__init__(self)
        if rank < 1 or alpha <= 0:
            raise ValueError(f"LoRA rank must be >= 1 and alpha > 0, got {rank} and {alpha}")
        first = target.layers[0]
        device = first.weight.device
        rows = target.rows or (None,) * len(target.layers)
        counts = [layer.out_features if r is None else len(r) for layer, r in zip(target.layers, rows)]
        self.lora_down = nn.Linear(first.in_features, rank, bias=False, device=device)
        self.lora_up = nn.Linear(rank, sum(counts), bias=False, device=device)
        nn.init.kaiming_uniform_(self.lora_down.weight, a=math.sqrt(5))
        nn.init.zeros_(self.lora_up.weight)
        self.register_buffer("alpha", torch.tensor(float(alpha), device=device))
        self.rank, self.scale, self.multiplier, self.dropouts = rank, float(alpha) / rank, multiplier, dropouts
        self._org_module = list(target.layers)
        # Per layer, the up rows that make its output rows in the layer's own order.
        self._up_rows: list[Tensor | slice] = []
        start = 0
        for count, order in zip(counts, rows):
            if order is None:
                self._up_rows.append(slice(start, start + count))
            else:
                inverse = torch.empty(count, dtype=torch.long)
                inverse[order] = torch.arange(start, start + count)
                self._up_rows.append(inverse.to(device))
            start += count
        self._shared: tuple[weakref.ref, Tensor | None, float] | None = None

    def apply_to(self) -> None:
        if "org_forwards" in self.__dict__:
            raise RuntimeError("LoRA module is already applied")
        self.org_forwards = [layer.forward for layer in self._org_module]
        for index, layer in enumerate(self._org_module):
            layer.forward = self._forward_of(index)

    def _forward_of(self, index: int) -> Callable[[Tensor], Tensor]:
        def forward(x: Tensor) -> Tensor:
            out = self.org_forwards[index](x)
            inner, scale = self._inner(x)
            if inner is None:
                return out
            up = self.lora_up.weight[self._up_rows[index]]
            return out + (torch.nn.functional.linear(inner, up) * (self.multiplier * scale)).to(out.dtype)
        return forward

    def _inner(self, x: Tensor) -> tuple[Tensor | None, float]:
        """down(x) after the dropouts, computed once for the layers that read this same `x`."""
        if self._shared is not None and self._shared[0]() is x:
            return self._shared[1], self._shared[2]
        drop, scale = self.dropouts, self.scale
        inner: Tensor | None = None
        if not (self.training and drop.module and torch.rand(1) < drop.module):
            inner = self.lora_down(x if torch.is_autocast_enabled(x.device.type) else x.to(self.lora_down.weight.dtype))
            if self.training and drop.neuron:
                inner = torch.nn.functional.dropout(inner, p=drop.neuron)
            if self.training and drop.rank:
                keep = (torch.rand((inner.size(0), self.rank), device=inner.device) > drop.rank).to(inner.dtype)
                inner = inner * (keep.unsqueeze(1) if inner.dim() == 3 else keep)
                scale = scale / (1.0 - drop.rank)
        self._shared = (weakref.ref(x), inner, scale)
        return inner, scale

    def forward(self, x: Tensor) -> Tensor:
        raise RuntimeError("a fused LoRA module runs through the layers it is applied to")


class SplitLoRAModule(FusedLoRAModule):
    """sd-scripts' split_qkv: each layer of a fused target its own LoRA of rank `rank` (as diffusers splits q, k, v
    and FLUX's MLP input), kept and saved as one fused kohya module of rank `rank` x layers: the downs stacked, the
    ups block-diagonal (the blocks off the diagonal take no part), and alpha x layers, so that alpha / rank is the
    trained scale in every tool that loads the file. (sd-scripts saves the trained alpha, so its split files load
    3-4x weaker: kohya-ss/sd-scripts#2204.)"""

    def __init__(self, target: LoraTarget, rank: int, alpha: float, multiplier: float = 1.0,
                 dropouts: Dropouts = Dropouts()) -> None:
        count = len(target.layers)
        super().__init__(target, rank * count, alpha * count, multiplier, dropouts)
        self.split_rank = rank
        block = torch.zeros_like(self.lora_up.weight, dtype=torch.bool)
        for index, rows in enumerate(self._up_rows):
            block[rows, index * rank:(index + 1) * rank] = True
        self.register_buffer("_block", block, persistent=False)

    def _forward_of(self, index: int) -> Callable[[Tensor], Tensor]:
        columns = slice(index * self.split_rank, (index + 1) * self.split_rank)

        def forward(x: Tensor) -> Tensor:
            out = self.org_forwards[index](x)
            inner, scale = self._inner(x)
            if inner is None:
                return out
            up = self.lora_up.weight[self._up_rows[index], columns]
            return out + (torch.nn.functional.linear(inner[..., columns], up) * (self.multiplier * scale)).to(out.dtype)
        return forward

    def saved_up(self) -> Tensor:
        return self.lora_up.weight * self._block


@dataclass(frozen=True)
class NetworkDims:
    """Rank/alpha found in a kohya LoRA file; conv_* are None when it has no 3x3 convs."""

    network_dim: int | None
    network_alpha: float | None
    conv_dim: int | None = None
    conv_alpha: float | None = None


BlockDims = tuple[list[int], list[float], "list[int] | None", "list[float] | None"]  # (dims, alphas, conv dims, conv alphas)


class LoRANetwork(nn.Module):
    """kohya's networks.lora: LoRA (and LoCon) modules on the UNet's and text encoders' layers.

    Ranks come from network_dim/conv_dim, or per UNet block (`block_dims`, sd-scripts' block_dims/block_alphas/
    conv_block_*), or per module from an existing file (`modules_dim`, dim_from_weights).
    """

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
        dropouts: Dropouts = Dropouts(),
        block_dims: BlockDims | None = None,
        modules_dim: Mapping[str, tuple[int, float]] | None = None,
        unet_targets: list[LoraTarget] | None = None,
        target_dims: Mapping[str, int] | None = None,
        split_fused: bool = False,
    ) -> None:
        super().__init__()
        if not (train_unet or train_text_encoder):
            raise ValueError("LoRA network has nothing to train: train_unet and train_text_encoder are both False")
        if unet_key_style not in ("diffusers", "sgm") and not (unet_key_style == "own" and unet_targets is not None):
            raise ValueError(f"unet_key_style must be 'diffusers' or 'sgm' (or 'own' with unet_targets), got "
                             f"{unet_key_style!r}")
        self.network_dim, self.network_alpha = network_dim, network_alpha
        self.conv_dim = conv_dim
        self.conv_alpha = (1.0 if conv_alpha is None else conv_alpha) if conv_dim else None  # kohya's default
        self.key_style, self.dropouts = unet_key_style, dropouts
        self._block_dims, self._modules_dim, self._target_dims = block_dims, modules_dim, target_dims
        self._split_fused = split_fused

        self.unet_loras = nn.ModuleDict()
        self.text_encoder_loras = nn.ModuleDict()
        self.text_encoder_index: dict[str, int] = {}  # module name -> which text encoder (0-based)
        if train_unet and unet_targets is not None:
            for target in unet_targets:
                fused = self._make_target_lora(target)
                if fused is not None:
                    self.unet_loras[target.name] = fused
        elif train_unet:
            rename = _sgm_renamer(unet) if unet_key_style == "sgm" else (lambda path: path)
            with_conv = conv_dim or modules_dim is not None or block_dims is not None and block_dims[2] is not None
            targets = UNET_TARGETS | UNET_CONV_TARGETS if with_conv else UNET_TARGETS
            for path, module in _target_layers(unet, targets):
                name = "lora_unet_" + _underscored(rename(path))
                lora = self._make_lora(name, module)
                if lora is not None:
                    self.unet_loras[name] = lora
        if train_text_encoder:
            for index, encoder in enumerate(text_encoders):
                prefix = "lora_te_" if len(text_encoders) == 1 else f"lora_te{index + 1}_"
                for path, module in _target_layers(encoder, TEXT_ENCODER_TARGETS):
                    if isinstance(module, nn.Linear):
                        # transformers 5's CLIPTextModel has no `text_model.` level; kohya names always do.
                        name = prefix + _underscored("text_model." + path.removeprefix("text_model."))
                        lora = self._make_lora(name, module)
                        if lora is not None:
                            self.text_encoder_loras[name] = lora
                            self.text_encoder_index[name] = index

    def _make_lora(self, name: str, module: nn.Linear | nn.Conv2d) -> LoRAModule | None:
        """The module of `name` with its rank and alpha (None: that layer gets no LoRA), as kohya chooses them."""
        spatial = isinstance(module, nn.Conv2d) and module.kernel_size != (1, 1)
        if self._modules_dim is not None:
            found = self._modules_dim.get(name)
            dim, alpha = found if found else (0, 0.0)
        elif self._block_dims is not None and name.startswith("lora_unet_"):
            dims, alphas, conv_dims, conv_alphas = self._block_dims
            block = block_index(name, self.key_style)
            if not spatial:
                dim, alpha = dims[block], alphas[block]
            elif conv_dims is not None and conv_alphas is not None:
                dim, alpha = conv_dims[block], conv_alphas[block]
            else:
                dim, alpha = 0, 0.0
        elif not spatial:
            dim, alpha = self.network_dim, self.network_alpha
        elif self.conv_dim:
            assert self.conv_alpha is not None
            dim, alpha = self.conv_dim, self.conv_alpha
        else:
            return None
        if not dim:
            return None
        return LoRAModule(module, dim, alpha or dim, dropouts=self.dropouts)

    def _make_target_lora(self, target: LoraTarget) -> LoRAModule | None:
        """A module of a family-named target: a plain LoRA on one layer, a fused one over several."""
        if self._modules_dim is not None:
            dim, alpha = self._modules_dim.get(target.name, (0, 0.0))
        elif self._target_dims is not None:  # the family's per-layer ranks (FLUX's network_args)
            dim, alpha = self._target_dims.get(target.name, self.network_dim), self.network_alpha
        else:
            dim, alpha = self.network_dim, self.network_alpha
        if not dim:
            return None
        if len(target.layers) == 1 and not any(r is not None for r in target.rows):
            return LoRAModule(target.layers[0], dim, alpha or dim, dropouts=self.dropouts)
        if not self._split_fused:
            return FusedLoRAModule(target, dim, alpha or dim, dropouts=self.dropouts)
        count = len(target.layers)
        if self._modules_dim is not None:  # a split module's file rank and alpha are the layers' together
            if dim % count:
                raise ValueError(f"split_qkv: {target.name} has rank {dim} in network_weights, not a multiple of "
                                 f"its {count} layers (was it trained without split_qkv?)")
            dim, alpha = dim // count, (alpha or dim) / count
        return SplitLoRAModule(target, dim, alpha or dim, dropouts=self.dropouts)

    def named_modules_for_kohya(self) -> list[tuple[str, LoRAModule]]:
        """(kohya name, module) for every LoRA module, UNet first."""
        return [*self.unet_loras.items(), *self.text_encoder_loras.items()]  # type: ignore[list-item]

    def apply_to(self) -> None:
        for _, lora in self.named_modules_for_kohya():
            lora.apply_to()

    def set_multiplier(self, multiplier: float) -> None:
        for _, lora in self.named_modules_for_kohya():
            lora.multiplier = multiplier

    @torch.no_grad()
    def max_norm_regularize(self, max_norm: float) -> tuple[int, float, float]:
        """kohya's scale_weight_norms: scale down every module whose update's norm exceeds `max_norm`.

        Returns (modules scaled, mean norm, max norm) after scaling.
        """
        scaled, norms = 0, []
        for _, lora in self.named_modules_for_kohya():
            norm = lora.update_weight().float().norm().clamp(min=max_norm / 2)
            ratio = float(torch.clamp(norm, max=max_norm) / norm)
            if ratio != 1:
                scaled += 1
                lora.lora_up.weight.mul_(ratio ** 0.5)
                lora.lora_down.weight.mul_(ratio ** 0.5)
            norms.append(float(norm) * ratio)
        return scaled, sum(norms) / max(1, len(norms)), max(norms, default=0.0)

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
    def modules_dim_from_state_dict(state_dict: Mapping[str, Tensor]) -> dict[str, tuple[int, float]]:
        """Each module's (rank, alpha) in a kohya LoRA file (alpha = rank when the file has none), for
        dim_from_weights."""
        dims = {}
        for key, down in state_dict.items():
            if key.endswith(".lora_down.weight"):
                name = key.removesuffix(".lora_down.weight")
                alpha = state_dict.get(f"{name}.alpha")
                dims[name] = (int(down.shape[0]), float(alpha) if alpha is not None else float(down.shape[0]))
        return dims

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
        f"{name}.lora_up.weight": lora.saved_up(),
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
