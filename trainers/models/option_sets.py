"""The shared options the flow families read, in the sets they read them (torch-free: their options.py name them,
see trainers/core/options/families.py)."""
from __future__ import annotations

# every flow family: the timestep density, caching captions, the diffusers copy of a LoRA
DENSITY: frozenset[str] = frozenset({"weighting_scheme", "logit_mean", "logit_std", "mode_scale",
                                     "text_encoder_batch_size", "save_diffusers_lora"})
# the families that draw their noise levels by timestep_sampling (SD3 draws by weighting_scheme)
SAMPLING: frozenset[str] = frozenset({"timestep_sampling", "sigmoid_scale", "discrete_flow_shift"})
# the families with a distilled (turbo) variant told from its files (trainers/models/distilled.py)
DISTILLED: frozenset[str] = frozenset({"training_adapter", "training_adapter_multiplier"})
# the families with a T5-XXL text encoder
T5: frozenset[str] = frozenset({"text_encoder_max_tokens", "apply_t5_attn_mask"})
# the families whose single files may lack parts, read from files of their own
SINGLE_FILE: frozenset[str] = frozenset({"tokenizer_cache_dir"})
# the edit families: the images each edit starts from
EDIT: frozenset[str] = frozenset({"control_directory", "no_resize_control", "control_resolution"})
EDIT_NOTES: dict[str, str] = {"conditioning_data_dir": "without masked_loss, their control images, as "
                                                       "control_directory."}
# SD1.x/2.x and SDXL UNets: their block-wise LoRA options and v-prediction
UNET: frozenset[str] = frozenset({"v_parameterization", "conv_dim", "conv_alpha", "block_dims", "block_alphas",
                                  "conv_block_dims", "conv_block_alphas", "down_lr_weight", "mid_lr_weight",
                                  "up_lr_weight"})
UNET_NOTES: dict[str, str] = {"blocks_to_swap": "its UNet's down, mid and up blocks count."}
