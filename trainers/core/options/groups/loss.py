"""Options: the loss, the noise and the timesteps it is computed at."""
from __future__ import annotations

from trainers.core.options.schema import Option

OPTIONS: tuple[Option, ...] = (
    Option("min_snr_gamma", "float", None, "Min-SNR loss weighting (5 is typical); unset for none.", "loss",
           min=0, nullable=True, advanced=True),
    Option("noise_offset", "float", 0.0, "Noise offset (e.g. 0.05) to learn darker and brighter images.",
           "loss", min=0, max=1, advanced=True),
)
