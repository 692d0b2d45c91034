"""Options: Full-weight training (dreambooth, finetune): what trains, EMA."""
from __future__ import annotations

from trainers.core.options.method_sets import FULL
from trainers.core.options.schema import Option

OPTIONS: tuple[Option, ...] = (
    Option("train_text_encoder", "bool", False, "Also train the text encoder(s), not only the UNet (more memory; "
           "learns new words better).", "training", methods=FULL),
    Option("use_ema", "str", "off", "Keep an exponential moving average (EMA) of the trained weights: 'gpu' keeps "
           "the float32 copy in GPU memory (fast), 'cpu' in CPU memory (saves GPU memory, slower updates).",
           "training", methods=FULL, choices=("off", "gpu", "cpu")),
    Option("ema_decay", "float", 0.9999, "EMA decay per step (closer to 1 = slower, smoother average).", "training",
           methods=FULL, min=0, max=1, advanced=True),
    Option("ema_update_every", "int", 1, "Update the EMA every N optimizer steps (the decay is raised to the power "
           "N, so the average spans the same steps).", "training", methods=FULL, min=1, max=100000, advanced=True),
    Option("save_ema", "str", "ema", "With EMA, what to save: the EMA weights, the trained (non-EMA) weights, or both "
           "(<output_name> non-EMA and <output_name>-ema).", "training", methods=FULL,
           choices=("ema", "non_ema", "both"), advanced=True),
    Option("sample_with_ema", "bool", True, "With EMA, make sample images with the EMA weights.", "training",
           methods=FULL, advanced=True),
)
