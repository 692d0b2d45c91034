"""Which methods an option applies to, from the registry (an option used by every method needs none)."""
from __future__ import annotations

from trainers.core.registry import methods_training, only

LORA = methods_training("network")  # methods that train a network (LoRA) on the frozen model
FULL = methods_training("full")  # methods that train the model's own weights
DREAMBOOTH = only("dreambooth")
