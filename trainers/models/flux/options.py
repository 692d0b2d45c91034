"""FLUX.1: the shared options it reads (torch-free; see trainers/core/options/families.py)."""
from __future__ import annotations

from trainers.models.option_sets import DENSITY, DISTILLED, SAMPLING, SINGLE_FILE, T5

READS = DENSITY | SAMPLING | T5 | SINGLE_FILE | DISTILLED | {"model_prediction_type", "guidance_scale", "clip_l", "t5xxl", "ae"}
# network_args of sd-scripts' networks.lora_flux that choose which FLUX.1 layers train and at which rank
# (lora_layers.py reads them); any other family refuses them.
NETWORK_ARGS = ("train_blocks", "train_double_block_indices", "train_single_block_indices", "img_attn_dim",
                "txt_attn_dim", "img_mlp_dim", "txt_mlp_dim", "img_mod_dim", "txt_mod_dim", "single_dim",
                "single_mod_dim", "in_dims")
NOTES = {
    "timestep_sampling": "sd-scripts' docs recommend 'shift' (with discrete_flow_shift 3.1582) or 'flux_shift'.",
    "weighting_scheme": "'sigma_sqrt' and 'cosmap' weight the loss by the noise level with model_prediction_type "
                        "'sigma_scaled'.",
    "text_encoder_max_tokens": "unset reads 512 for dev, 256 for schnell.",
    "apply_t5_attn_mask": "in the text encoder and in the transformer's attention.",
    "ae": "FLUX.1's ae.safetensors.",
    "tokenizer_cache_dir": "its T5 tokenizer.",
    "blocks_to_swap": "a double block counts as two single ones.",
}
