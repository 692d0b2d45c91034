"""Where a tool computes: the `device` option as a torch device."""
from __future__ import annotations

import torch

from trainers.core.errors import ToolError


def compute_device(choice: str) -> torch.device:
    """auto: the first GPU when there is one, else the CPU; cuda / cuda:N must be visible."""
    choice = choice.strip().lower()
    if choice == "auto":
        return torch.device("cuda:0" if torch.cuda.is_available() else "cpu")
    if choice == "cpu":
        return torch.device("cpu")
    device = torch.device(choice)
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if (device.index or 0) >= count:
        raise ToolError("device", f"{choice}: {count or 'no'} CUDA GPU{'s' if count != 1 else ''} visible here; "
                        "use cpu, auto, or a GPU that exists")
    return device
