"""SD3 and SD3.5: their own options and the shared ones they read (torch-free; see
trainers/core/options/families.py)."""
from __future__ import annotations

from trainers.core.options.schema import Option
from trainers.models.option_sets import DENSITY, SINGLE_FILE, T5

T5_DTYPE_CHOICES = ("auto", "float32", "fp16", "bf16")

READS = DENSITY | T5 | SINGLE_FILE | {"clip_l", "t5xxl"}
NOTES = {
    "weighting_scheme": "it draws every timestep by 'logit_normal' and 'mode' (it has no timestep_sampling); "
                        "'sigma_sqrt' and 'cosmap' weight the loss by the noise level instead.",
    "text_encoder_max_tokens": "unset reads 256.",
    "apply_t5_attn_mask": "in the text encoder.",
    "tokenizer_cache_dir": "its T5 tokenizer.",
}
OPTIONS: tuple[Option, ...] = (
    Option("clip_g", "str", "", "A single file without it: the CLIP-G text encoder's .safetensors (e.g. "
           "clip_g.safetensors). Not needed when the model file holds it.", "model", path="file", advanced=True),
    Option("training_shift", "float", 1.0, "Shift of the timestep distribution (above 1: more training at high "
           "noise, the overall structure; below 1: at low noise, the details).", "flow", min=0, advanced=True),
    Option("apply_lg_attn_mask", "bool", False, "Mask the padding tokens in the CLIP-L and CLIP-G text encoders.",
           "flow", advanced=True),
    Option("t5xxl_dtype", "str", "auto", "The precision the T5-XXL text encoder runs in, outside mixed precision "
           "('auto': the mixed_precision dtype, under autocast, like the other text encoders). Its weights load in "
           "the mixed_precision dtype and are cast to this one when it first runs: 'bf16' or 'fp16' halve a float32 "
           "run's T5 memory; 'float32' computes its states in full precision.", "flow", choices=T5_DTYPE_CHOICES,
           advanced=True),
)
