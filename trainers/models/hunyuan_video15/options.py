"""HunyuanVideo 1.5: its own option and the shared options it reads (torch-free; see
trainers/core/options/families.py). musubi-tuner trains it with timestep_sampling 'shift' and discrete_flow_shift
2.0 (its docs/hunyuan_video_1_5.md); the presets set them. ComfyUI's split files (musubi-tuner's --dit, --vae,
--text_encoder, --byt5, --image_encoder) name their parts in text_encoder, byt5, ae and image_encoder."""
from __future__ import annotations

from trainers.core.options.schema import Option
from trainers.models.option_sets import DENSITY, SAMPLING, SINGLE_FILE

READS = DENSITY | SAMPLING | SINGLE_FILE | {"text_encoder", "byt5", "ae"}
OPTIONS: tuple[Option, ...] = (
    Option("image_encoder", "str", "", "A single file of the image-to-video transformer (ComfyUI's "
           "hunyuanvideo1.5_720p_i2v_fp16.safetensors): its SigLIP image encoder's .safetensors (ComfyUI's "
           "clip_vision/sigclip_vision_patch14_384.safetensors, musubi-tuner's --image_encoder); given, the file "
           "trains as image to video. A diffusers folder has its own.", "model", path="file", advanced=True),
)
NOTES = {
    "text_encoder": "ComfyUI's text_encoders/qwen_2.5_vl_7b.safetensors (musubi-tuner's --text_encoder).",
    "byt5": "ComfyUI's text_encoders/byt5_small_glyphxl_fp16.safetensors (musubi-tuner's --byt5).",
    "ae": "ComfyUI's vae/hunyuanvideo15_vae_fp16.safetensors, or Tencent's vae/diffusion_pytorch_model.safetensors "
          "(musubi-tuner's --vae).",
    "tokenizer_cache_dir": "its Qwen2.5-VL and ByT5 tokenizers.",
}
