"""What ComfyUI's Wan split files hold, told from their tensor names alone (torch-free)."""
from __future__ import annotations

from collections.abc import Iterable


def scaled_fp8(names: Iterable[str]) -> bool:
    """ComfyUI's *_fp8_scaled files: a `scaled_fp8` marker and a scale beside each weight, read by ComfyUI only."""
    return any(k == "scaled_fp8" or k.endswith((".scaled_fp8", ".scale_weight")) for k in names)
