"""Wan 2.2's own options (the expert pair) and the shared ones it reads (torch-free; see
trainers/core/options/families.py). Names and meanings are musubi-tuner's (wan_train_network.py)."""
from __future__ import annotations

from trainers.core.options.schema import Option
from trainers.models.option_sets import DENSITY, SAMPLING

EXPERTS = ("both", "high_noise", "low_noise")
READS = DENSITY | SAMPLING
OPTIONS: tuple[Option, ...] = (
    Option("timestep_boundary", "float", None, "Where the A14B pair switches experts: the high-noise expert "
           "(transformer) takes timesteps at or above it, the low-noise one (transformer_2) those below. A ratio "
           "0-1, or a timestep above 1 (read as timestep / 1000, as musubi-tuner reads it). Unset: the model's "
           "boundary_ratio (model_index.json), else 0.875 for text-to-video and 0.9 for image-to-video.", "flow",
           min=0, max=1000, nullable=True),
    Option("train_expert", "str", "both", "Which expert of the A14B pair the LoRA trains: 'both' (each on its own "
           "timestep range, a LoRA saved per expert beside the run's file: <name>_high_noise.safetensors and "
           "<name>_low_noise.safetensors), or one of them ('high_noise', 'low_noise': its timesteps scaled into its "
           "range, as musubi-tuner's min_timestep/max_timestep do, the other expert frozen for samples).", "flow",
           choices=EXPERTS),
)
