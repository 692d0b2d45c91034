"""Low-rank factors of a weight change, at a fixed rank or one chosen from its singular values, and what they keep.

`factor_product` takes a change given as factors (up @ down: a LoRA, or LoRAs side by side) and never forms the
full matrix: QR of both factors leaves a small core whose SVD is the change's. `factor_matrix` takes a full change
(a finetune minus its base). Both return up = U S, down = Vh, as sd-scripts' resize and extract scripts do.

The dynamic rules (sd-scripts' resize_lora.py names; kohya-ss/sd-scripts#2194 fixed its one-too-many):
sv_ratio r keeps the singular values above S[0] / r; sv_fro f the fewest whose squares keep f^2 of the squared
Frobenius norm; sv_cumulative c the fewest whose sum keeps c of the sum; sv_threshold t those above t. Every rule
keeps at least 1 and at most the rank asked for (and the most the change's shape allows); a change that is zero
keeps rank 1.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

MIN_SV = 1e-6  # sd-scripts': a change whose largest singular value is below this counts as none


@dataclass(frozen=True)
class RankRule:
    max_rank: int
    method: str = "fixed"
    param: float | None = None

    def rank(self, singular: Tensor) -> int:
        """How many of `singular` (descending) to keep."""
        s = singular.double()
        if float(s[0]) <= MIN_SV:
            return 1
        if self.method == "fixed":
            wanted = self.max_rank
        elif self.method == "sv_ratio":
            wanted = int((s > s[0] / self.param).sum())
        elif self.method == "sv_threshold":
            wanted = int((s > self.param).sum())
        else:
            values = s.pow(2) if self.method == "sv_fro" else s
            target = self.param ** 2 if self.method == "sv_fro" else self.param
            kept = torch.cumsum(values, 0) / values.sum()
            wanted = int(torch.searchsorted(kept, torch.tensor(target - 1e-12, dtype=kept.dtype))) + 1
        return max(1, min(wanted, self.max_rank, s.shape[0]))


@dataclass
class Factors:
    up: Tensor  # (out, k): U S
    down: Tensor  # (k, in): Vh
    singular: Tensor  # every singular value of the change, descending

    @property
    def rank(self) -> int:
        return int(self.down.shape[0])

    def kept(self) -> dict[str, float]:
        """What the kept rank holds of the change: the Frobenius norm's share (`fro`), the singular values' sum's
        share (`sum`), and largest / smallest kept singular value (`max_ratio`), as sd-scripts --verbose prints."""
        s, k = self.singular.double(), self.rank
        total_sq, total = float(s.pow(2).sum()), float(s.sum())
        return {"fro": math.sqrt(float(s[:k].pow(2).sum()) / total_sq) if total_sq > 0 else 1.0,
                "sum": float(s[:k].sum()) / total if total > 0 else 1.0,
                "max_ratio": float(s[0] / s[k - 1]) if float(s[k - 1]) > 0 else math.inf}


def _truncate(u: Tensor, s: Tensor, vh: Tensor, rule: RankRule) -> Factors:
    k = rule.rank(s)
    return Factors(u[:, :k] * s[:k], vh[:k], s)


def factor_product(up: Tensor, down: Tensor, rule: RankRule) -> Factors:
    """The change up @ down (2-D, float32) at the rule's rank."""
    q_up, r_up = torch.linalg.qr(up, mode="reduced")
    q_down, r_down = torch.linalg.qr(down.T, mode="reduced")
    u, s, vh = torch.linalg.svd(r_up @ r_down.T, full_matrices=False)
    return _truncate(q_up @ u, s, vh @ q_down.T, rule)


def factor_matrix(change: Tensor, rule: RankRule) -> Factors:
    """A full change (2-D, float32) at the rule's rank."""
    u, s, vh = torch.linalg.svd(change, full_matrices=False)
    return _truncate(u, s, vh, rule)


def shaped(factors: Factors, weight_shape: tuple[int, ...]) -> tuple[Tensor, Tensor]:
    """(down, up) shaped for a layer whose weight has `weight_shape`: a conv's down takes its kernel, its up is 1x1."""
    if len(weight_shape) == 2:
        return factors.down, factors.up
    out, inner = weight_shape[0], tuple(weight_shape[1:])
    return factors.down.reshape(factors.rank, *inner), factors.up.reshape(out, factors.rank, 1, 1)


def clamp_quantile(factors: Factors, quantile: float) -> Factors:
    """sd-scripts' extract: up and down clamped to +- the `quantile` of their values taken together (1: as they are)."""
    if quantile >= 1:
        return factors
    values = torch.cat([factors.up.flatten(), factors.down.flatten()]).float()
    if values.numel() > 1 << 24:  # torch.quantile's limit: a sample is as good a bound
        values = values[torch.randperm(values.numel(), generator=torch.Generator().manual_seed(0))[:1 << 24]]
    bound = float(torch.quantile(values, quantile))
    return Factors(factors.up.clamp(-bound, bound), factors.down.clamp(-bound, bound), factors.singular)
