"""Options: The base model."""
from __future__ import annotations

from trainers.core.options.schema import Option
from trainers.core.registry import FAMILY_NAMES

# a model's parts in files of their own (sd-scripts' names; text_encoder: musubi-tuner's)
COMPONENT_FILE_OPTIONS = ("clip_l", "clip_g", "t5xxl", "ae", "text_encoder", "byt5")

OPTIONS: tuple[Option, ...] = (
    Option("pretrained_model_name_or_path", "str", "", "Base model: a local diffusers folder, a hub id, or a "
           "single-file .safetensors/.ckpt checkpoint (with clip_l, clip_g, t5xxl, ae, text_encoder or byt5 for the "
           "parts a single file lacks, where its family reads them).", "model", required=True, path="any"),
    Option("model_family", "str", "auto", "Model family; 'auto' detects it from the model files.", "model",
           choices=("auto", *FAMILY_NAMES), advanced=True),
    Option("v_parameterization", "bool", False, "Train with v-prediction. Models whose scheduler says "
           "v_prediction (a 768-v model) use it even when this is off.", "model", advanced=True),
    Option("vae", "str", "", "Optional VAE to use instead of the model's own (a diffusers AutoencoderKL folder).",
           "model", path="dir", advanced=True),
    # sd-scripts' separate component files of single files (sd3_/flux_train_network.py's options).
    Option("clip_l", "str", "", "A single file without it: the CLIP-L text encoder's .safetensors (e.g. "
           "clip_l.safetensors). Not needed when the model file holds it.", "model", path="file", advanced=True),
    Option("t5xxl", "str", "", "A single file without it: the T5-XXL text encoder's .safetensors (e.g. "
           "t5xxl_fp16.safetensors). Not needed when the model file holds it.", "model", path="file", advanced=True),
    Option("ae", "str", "", "A single file without it: the autoencoder's .safetensors (musubi-tuner's --vae). Not "
           "needed when the model file holds it.", "model", path="file", advanced=True),
    Option("text_encoder", "str", "", "A single file without it (ComfyUI's diffusion_models file, musubi-tuner's "
           "--dit): its text encoder's .safetensors (musubi-tuner's --text_encoder). Its tokenizer is read from "
           "tokenizer_cache_dir (fetched from the hub once).", "model", path="file", advanced=True),
    Option("byt5", "str", "", "A single file without it: its ByT5 glyph encoder's .safetensors "
           "(sd-scripts' --byt5). Not needed when the model file holds it.", "model", path="file",
           advanced=True),
    Option("tokenizer_cache_dir", "str", "", "Where tokenizers a single file lacks are kept (fetched from the hub "
           "once, then read from here offline), as in sd-scripts.", "model", path="out", advanced=True),
)
