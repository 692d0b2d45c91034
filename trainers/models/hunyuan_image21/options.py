"""HunyuanImage 2.1: the shared options it reads, sd-scripts' (hunyuan_image_train_network.py) names and meanings
(torch-free; see trainers/core/options/families.py)."""
from __future__ import annotations

from trainers.models.option_sets import DENSITY, SAMPLING, SINGLE_FILE

READS = DENSITY | SAMPLING | SINGLE_FILE | {"model_prediction_type", "guidance_scale", "text_encoder", "byt5", "ae"}
NOTES = {
    "text_encoder": "ComfyUI's text_encoders/qwen_2.5_vl_7b.safetensors (sd-scripts' --text_encoder).",
    "byt5": "ComfyUI's text_encoders/byt5_small_glyphxl_fp16.safetensors.",
    "ae": "ComfyUI's vae/hunyuan_image_2.1_vae_fp16.safetensors (sd-scripts' --vae).",
    "tokenizer_cache_dir": "its Qwen2.5-VL and ByT5 tokenizers.",
    "discrete_flow_shift": "sd-scripts' default there is 5.0 (the presets set it).",
    "model_prediction_type": "sd-scripts' default there is 'raw' (the presets set it).",
    "guidance_scale": "only its distilled variant has a guidance embedding (its pipeline gives it x 1000).",
}
