"""The weights of a saved LoRA read back from disk: no NaN/Inf, a learned delta that is not zero, and the modules that
never moved (per-module norms of `up @ down * alpha / rank`; LoHa's and LoKr's own deltas; other kinds' tensor norms)."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import torch
from torch import Tensor

from trainers.loras.lora_state import LowRankModule

SHOWN = 5  # module names shown in a warning


@dataclass
class WeightsCheck:
    modules: int = 0
    nonfinite: list[str] = field(default_factory=list)  # tensor names holding NaN or Inf
    still: list[str] = field(default_factory=list)  # modules whose delta is zero
    largest: float = 0.0  # the largest module delta's norm

    def warnings(self) -> list[str]:
        found = []
        if self.nonfinite:
            found.append(f"NaN/Inf weights in {len(self.nonfinite)} tensors, e.g. {shown_names(self.nonfinite)}: the "
                         "file breaks every image it is applied to")
        if self.modules and len(self.still) == self.modules:
            found.append(f"the learned delta is zero in all {self.modules} modules: the LoRA does nothing (did the "
                         "network train? check learning_rate and the trained modules)")
        elif self.still:
            found.append(f"{len(self.still)} of {self.modules} modules never moved (their delta is zero), e.g. "
                         f"{shown_names(self.still)}")
        return found


def shown_names(names: list[str]) -> str:
    """The first SHOWN of `names`, an ellipsis after them when there are more."""
    return ", ".join(names[:SHOWN]) + (" …" if len(names) > SHOWN else "")


def _mat(t: Tensor) -> Tensor:
    return t.float().flatten(1) if t.dim() > 1 else t.float().reshape(-1, 1)


def _scale(parts: Mapping[str, Tensor], rank: int) -> float:
    alpha = parts.get("alpha")
    return float(alpha) / rank if alpha is not None and rank else 1.0


def module_delta(parts: Mapping[str, Tensor]) -> float:
    """The Frobenius norm of one module's learned change (a cheap stand-in where the kind has no cheap delta)."""
    down, up = parts.get("lora_down.weight", parts.get("lora_A.weight")), parts.get("lora_up.weight",
                                                                                    parts.get("lora_B.weight"))
    if down is not None and up is not None:
        if "lora_mid.weight" in parts:  # Tucker: a bound of the product's norm, zero when any factor is
            return float(torch.linalg.norm(up.float()) * torch.linalg.norm(parts["lora_mid.weight"].float())
                         * torch.linalg.norm(_mat(down))) * _scale(parts, down.shape[0])
        alpha = parts.get("alpha")
        return float(torch.linalg.norm(LowRankModule(down, up, float(alpha) if alpha is not None
                                                     else float(down.shape[0])).delta()))
    if "hada_w1_a" in parts:
        w1 = _mat(parts["hada_w1_a"]) @ _mat(parts["hada_w1_b"])
        w2 = _mat(parts["hada_w2_a"]) @ _mat(parts["hada_w2_b"])
        return float(torch.linalg.norm(w1 * w2)) * _scale(parts, parts["hada_w1_b"].shape[0])
    if any(k.startswith("lokr_") for k in parts):  # the norm of a Kronecker product is the product of the norms
        w1 = parts.get("lokr_w1")
        w2 = parts.get("lokr_w2")
        n1 = torch.linalg.norm(w1.float()) if w1 is not None else torch.linalg.norm(
            _mat(parts["lokr_w1_a"]) @ _mat(parts["lokr_w1_b"]))
        n2 = torch.linalg.norm(w2.float()) if w2 is not None else torch.linalg.norm(
            _mat(parts["lokr_w2_a"]) @ _mat(parts["lokr_w2_b"]))
        return float(n1 * n2)
    return float(sum(torch.linalg.norm(t.float()) for k, t in parts.items() if k not in ("alpha", "dora_scale")
                     and t.numel()))


def check_weights(modules: Mapping[str, Mapping[str, Tensor]]) -> WeightsCheck:
    found = WeightsCheck(modules=len(modules))
    for name, parts in modules.items():
        bad = [f"{name}.{k}" for k, t in parts.items() if t.is_floating_point() and not bool(torch.isfinite(t).all())]
        found.nonfinite += bad
        if bad:
            continue
        delta = module_delta(parts)
        found.largest = max(found.largest, delta)
        if delta == 0.0:
            found.still.append(name)
    return found
