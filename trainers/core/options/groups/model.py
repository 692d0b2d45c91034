"""Options: The base model."""
from __future__ import annotations

from trainers.core.options.schema import Option
from trainers.core.registry import FAMILY_NAMES

OPTIONS: tuple[Option, ...] = (
    Option("pretrained_model_name_or_path", "str", "", "Base model: a local diffusers folder, a hub id, or a "
           "single-file .safetensors/.ckpt checkpoint (SD1.x, SD2.x or SDXL).", "model", required=True, path="any"),
    Option("model_family", "str", "auto", "Model family; 'auto' detects it from the model files.", "model",
           choices=("auto", *FAMILY_NAMES), advanced=True),
    Option("v_parameterization", "bool", False, "Train with v-prediction. Models whose scheduler says "
           "v_prediction (SD2.x 768-v) use it even when this is off.", "model", advanced=True),
    Option("vae", "str", "", "Optional VAE to use instead of the model's own (a diffusers AutoencoderKL folder).",
           "model", path="dir", advanced=True),
    Option("clip_skip", "int", 1, "Use the output of the N-th text-encoder layer from the end (1 = last). "
           "SD1.x/SD2.x only.", "model", min=1, max=12, advanced=True),
)
