"""Options: The base model."""
from __future__ import annotations

from trainers.core.options.schema import Option
from trainers.core.registry import FAMILY_NAMES

# a model's parts in files of their own (sd-scripts' names; text_encoder: musubi-tuner's)
COMPONENT_FILE_OPTIONS = ("clip_l", "clip_g", "t5xxl", "ae", "text_encoder")

OPTIONS: tuple[Option, ...] = (
    Option("pretrained_model_name_or_path", "str", "", "Base model: a local diffusers folder, a hub id, or a "
           "single-file .safetensors/.ckpt checkpoint (SD1.x, SD2.x, SDXL; SD3/SD3.5 or FLUX.1 files such as "
           "flux1-dev.safetensors, with clip_l, clip_g, t5xxl and ae for the parts they lack).", "model",
           required=True, path="any"),
    Option("model_family", "str", "auto", "Model family; 'auto' detects it from the model files.", "model",
           choices=("auto", *FAMILY_NAMES), advanced=True),
    Option("v_parameterization", "bool", False, "Train with v-prediction. Models whose scheduler says "
           "v_prediction (SD2.x 768-v) use it even when this is off.", "model", advanced=True),
    Option("vae", "str", "", "Optional VAE to use instead of the model's own (a diffusers AutoencoderKL folder).",
           "model", path="dir", advanced=True),
    Option("clip_skip", "int", 1, "Use the output of the N-th text-encoder layer from the end (1 = last). "
           "SD1.x/SD2.x only.", "model", min=1, max=12, advanced=True),
    # sd-scripts' separate component files of SD3 and FLUX.1 single files (sd3_/flux_train_network.py's options).
    Option("clip_l", "str", "", "SD3 or FLUX.1 from a single file: the CLIP-L text encoder's .safetensors (e.g. "
           "clip_l.safetensors). Not needed when the model file holds it.", "model", path="file", advanced=True),
    Option("clip_g", "str", "", "SD3 from a single file: the CLIP-G text encoder's .safetensors (e.g. "
           "clip_g.safetensors). Not needed when the model file holds it.", "model", path="file", advanced=True),
    Option("t5xxl", "str", "", "SD3 or FLUX.1 from a single file: the T5-XXL text encoder's .safetensors (e.g. "
           "t5xxl_fp16.safetensors). Not needed when the model file holds it.", "model", path="file", advanced=True),
    Option("ae", "str", "", "FLUX.1, Z-Image, Lumina 2 or Qwen-Image from a single file: the autoencoder's "
           ".safetensors (FLUX.1's ae.safetensors, which Z-Image and Lumina 2 use too; Qwen-Image's "
           "vae/qwen_image_vae.safetensors; musubi-tuner's --vae). Not needed when the model file holds it.", "model",
           path="file", advanced=True),
    Option("text_encoder", "str", "", "Z-Image, Lumina 2 or Qwen-Image from a single file (ComfyUI's "
           "diffusion_models file, musubi-tuner's --dit): its text encoder's .safetensors (ComfyUI's "
           "text_encoders/qwen_3_4b.safetensors, gemma_2_2b.safetensors or qwen_2.5_vl_7b.safetensors; musubi-tuner's "
           "--text_encoder). Its tokenizer is read from tokenizer_cache_dir (fetched from the hub once).", "model",
           path="file", advanced=True),
    Option("tokenizer_cache_dir", "str", "", "Where tokenizers a single file lacks are kept (SD3's and FLUX.1's T5 "
           "tokenizer, Z-Image's Qwen3, Lumina 2's Gemma 2 and Qwen-Image's Qwen2.5-VL ones: fetched from the hub "
           "once, then read from here offline), as in sd-scripts.", "model", path="out", advanced=True),
)
