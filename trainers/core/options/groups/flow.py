"""Options: flow-matching training of SD3/SD3.5, FLUX.1, Chroma, Z-Image, Qwen-Image and Lumina 2 models
(sd-scripts' names, meanings and defaults; musubi-tuner uses the same for Z-Image and Qwen-Image).

They apply to the flow families only; on SD1.x/SD2.x/SDXL models a value other than the default is refused when the
model is checked (trainers/models: each family's option_issues). Which family reads which option is said in its help.
"""
from __future__ import annotations

from trainers.core.options.schema import Option

COMMON_TIMESTEP_SAMPLINGS = ("sigma", "uniform", "sigmoid", "shift", "flux_shift")  # every family drawing by it
FAMILY_TIMESTEP_SAMPLINGS = ("qwen_shift", "nextdit_shift", "flux2_shift", "krea2_shift")  # one family's own
TIMESTEP_SAMPLINGS = COMMON_TIMESTEP_SAMPLINGS + FAMILY_TIMESTEP_SAMPLINGS
MODEL_PREDICTION_TYPES = ("raw", "additive", "sigma_scaled")
WEIGHTING_SCHEMES = ("sigma_sqrt", "logit_normal", "mode", "cosmap", "none", "uniform")
T5_DTYPE_CHOICES = ("auto", "float32", "fp16", "bf16")
# the flow families that draw their noise levels by timestep_sampling (SD3 draws by weighting_scheme)
_NOT_SD3 = ("FLUX.1, FLUX.1 Kontext, FLUX.2, Chroma, Z-Image, Qwen-Image, Qwen-Image 2.1, Qwen-Image-Edit, "
            "Qwen-Image-Edit-2509/2511, Lumina 2 and Krea 2")

OPTIONS: tuple[Option, ...] = (
    Option("timestep_sampling", "str", "sigma", _NOT_SD3 + ": how the noise level (sigma) of each image is drawn. "
           "'sigma': from weighting_scheme's density over the schedule shifted by discrete_flow_shift; 'uniform': "
           "uniform in [0, 1); 'sigmoid': sigmoid of a normal draw times sigmoid_scale; 'shift': 'sigmoid' then "
           "shifted by discrete_flow_shift; 'flux_shift': 'sigmoid' then shifted by the image's size as FLUX.1 dev "
           "samples. sd-scripts' docs recommend 'shift' (with discrete_flow_shift 3.1582) or 'flux_shift'. Qwen-Image "
           "(2.1 and Edit too) only: 'qwen_shift', 'sigmoid' then shifted by the image's size as its pipeline samples "
           "(musubi-tuner's). Lumina 2 only: 'nextdit_shift', uniform then shifted by the image's size as "
           "'flux_shift' (sd-scripts' advice for Lumina 2). FLUX.2 only: 'flux2_shift', 'sigmoid' then shifted by "
           "FLUX.1's rule for the tokens FLUX.2 reads (musubi-tuner's advice for FLUX.2). Krea 2 only: 'krea2_shift', "
           "'sigmoid' then shifted by the image's size as Krea 2 base samples (musubi-tuner's).",
           "flow", choices=TIMESTEP_SAMPLINGS),
    Option("sigmoid_scale", "float", 1.0, _NOT_SD3 + ": scale of the normal draw of timestep_sampling 'sigmoid', "
           "'shift' and 'flux_shift' (larger: closer to uniform).", "flow", min=0, advanced=True),
    Option("discrete_flow_shift", "float", 3.0, _NOT_SD3 + ": the shift of timestep_sampling 'shift' and 'sigma' "
           "(sigma' = shift * sigma / (1 + (shift - 1) * sigma)).", "flow", min=0, advanced=True),
    Option("model_prediction_type", "str", "sigma_scaled", "FLUX.1, FLUX.1 Kontext, Chroma and Lumina 2: what the "
           "transformer's output is taken for before the loss. 'raw': the velocity (noise - latents) as it is; "
           "'additive': added to the noisy input; 'sigma_scaled': noisy input - sigma x output, with "
           "weighting_scheme's loss weights (sd-scripts' default; its docs recommend 'raw').", "flow",
           choices=MODEL_PREDICTION_TYPES),
    Option("guidance_scale", "float", 3.5, "FLUX.1 dev, FLUX.1 Kontext dev and FLUX.2 dev only: the guidance the "
           "model's guidance embedding is given while training (dev is guidance-distilled); sd-scripts' docs "
           "recommend 1.0.", "flow", min=0),
    Option("weighting_scheme", "str", "uniform", "Flow families: 'logit_normal' and 'mode' draw the timesteps from "
           "that density (SD3 always, the others with timestep_sampling 'sigma'); 'sigma_sqrt' and 'cosmap' weight "
           "the loss by the noise level instead (SD3, and FLUX.1/Chroma with model_prediction_type 'sigma_scaled'); "
           "'none' and 'uniform': neither.", "flow", choices=WEIGHTING_SCHEMES, advanced=True),
    Option("logit_mean", "float", 0.0, "Flow families: mean of weighting_scheme 'logit_normal'.", "flow",
           advanced=True),
    Option("logit_std", "float", 1.0, "Flow families: standard deviation of weighting_scheme 'logit_normal'.", "flow",
           min=0, advanced=True),
    Option("mode_scale", "float", 1.29, "Flow families: scale of weighting_scheme 'mode'.", "flow", advanced=True),
    Option("training_shift", "float", 1.0, "SD3 only: shift of the timestep distribution (above 1: more training at "
           "high noise, the overall structure; below 1: at low noise, the details).", "flow", min=0, advanced=True),
    Option("t5xxl_max_token_length", "int", None, "SD3, FLUX.1, FLUX.1 Kontext and Chroma: tokens of each caption "
           "the T5-XXL text encoder reads (unset: 256 for SD3 and FLUX schnell, 512 for FLUX dev and Chroma).",
           "flow", min=1, max=4096, nullable=True, advanced=True),
    Option("apply_t5_attn_mask", "bool", False, "SD3, FLUX.1 and FLUX.1 Kontext: mask T5-XXL's padding tokens: in "
           "the text encoder (SD3 and FLUX) and in the transformer's attention (FLUX). Chroma always masks it (as "
           "sd-scripts requires).", "flow", advanced=True),
    Option("apply_lg_attn_mask", "bool", False, "SD3 only: mask the padding tokens in the CLIP-L and CLIP-G text "
           "encoders.", "flow", advanced=True),
    Option("t5xxl_dtype", "str", "auto", "SD3 only: the precision the T5-XXL text encoder runs in, outside "
           "mixed precision ('auto': the mixed_precision dtype, under autocast, like the other text encoders). Its "
           "weights load in the mixed_precision dtype and are cast to this one when it first runs: 'bf16' or "
           "'fp16' halve a float32 run's T5 memory; 'float32' computes its states in full precision.", "flow",
           choices=T5_DTYPE_CHOICES, advanced=True),
    Option("text_encoder_batch_size", "int", None, "Flow families: captions encoded at once when "
           "cache_text_encoder_outputs caches them before training (unset: 16). Larger is faster and needs more "
           "memory; the outputs are the same.", "flow", min=1, max=4096, nullable=True, advanced=True),
)
