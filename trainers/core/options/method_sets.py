"""Which methods a shared option applies to, from the registry (an option used by every method needs none; a
method's own options name it in its folder's options.py)."""
from __future__ import annotations

from trainers.core.registry import methods_training

LORA = methods_training("network")  # methods that train a network (LoRA) on the frozen model
FULL = methods_training("full")  # methods that train the model's own weights
