"""HunyuanImage 2.1: the shared options it reads, sd-scripts' (hunyuan_image_train_network.py) names and meanings
(torch-free; see trainers/core/options/families.py)."""
from __future__ import annotations

from trainers.models.option_sets import DENSITY, SAMPLING

READS = DENSITY | SAMPLING | {"model_prediction_type", "guidance_scale"}
NOTES = {
    "discrete_flow_shift": "sd-scripts' default there is 5.0 (the presets set it).",
    "model_prediction_type": "sd-scripts' default there is 'raw' (the presets set it).",
    "guidance_scale": "only its distilled variant has a guidance embedding (its pipeline gives it x 1000).",
}
