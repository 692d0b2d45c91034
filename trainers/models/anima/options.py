"""Anima: its own options (sd-scripts' anima_train_network.py names: the LLM adapter's file, the T5 tokenizer) and
the shared ones it reads (torch-free; see trainers/core/options/families.py)."""
from __future__ import annotations

from trainers.core.options.schema import Option
from trainers.models.option_sets import DENSITY, SAMPLING, SINGLE_FILE

# no diffusers copy of a LoRA (save_diffusers_lora): diffusers has no Anima DiffusionPipeline to load one
READS = (DENSITY - {"save_diffusers_lora"}) | SAMPLING | SINGLE_FILE | {"text_encoder", "ae"}
OPTIONS: tuple[Option, ...] = (
    Option("llm_adapter_path", "str", "", "The LLM adapter's .safetensors, for a DiT file without it "
           "(sd-scripts' --llm_adapter_path). Unset: the adapter in the model file (llm_adapter.*), as Anima's "
           "published files hold it.", "model", path="file", advanced=True),
    Option("t5_tokenizer_path", "str", "", "A folder with the T5 tokenizer whose token ids the LLM adapter "
           "reads (sd-scripts' --t5_tokenizer_path; google/t5-v1_1-xxl's vocabulary). Unset: google/t5-v1_1-xxl's, "
           "from tokenizer_cache_dir (fetched from the hub once).", "model", path="dir", advanced=True),
)
# networks.lora_anima's switch: LoRA modules on the LLM adapter's blocks too (sd-scripts' default: off)
NETWORK_ARGS = ("train_llm_adapter",)
NOTES = {
    "text_encoder": "circlestone-labs/Anima's text_encoders/qwen_3_06b_base.safetensors (sd-scripts' --qwen3).",
    "ae": "circlestone-labs/Anima's vae/qwen_image_vae.safetensors, the Qwen-Image VAE (sd-scripts' --vae).",
    "tokenizer_cache_dir": "its Qwen3 tokenizer (Qwen/Qwen3-0.6B-Base's) and the adapter's T5 tokenizer "
                           "(google/t5-v1_1-xxl's).",
    "timestep_sampling": "sd-scripts' default there is 'sigmoid' (the presets set it).",
    "discrete_flow_shift": "sd-scripts' default there is 1.0 (the presets set it); samples shift by 3.0 as ComfyUI.",
}
