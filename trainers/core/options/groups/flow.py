"""Options: flow-matching training (sd-scripts' names, meanings and defaults; musubi-tuner uses the same).

They apply to the flow families only; on the others a value other than the default is refused when the model is
checked (trainers/models: each family's option_issues). Which family reads which option, the timestep_sampling
values of one family and what an option means for a family are declared in the family's folder
(trainers/models/<family>/options.py) and written into the help by trainers/core/options/families.py.
"""
from __future__ import annotations

from trainers.core.options.schema import Option

# every family drawing by timestep_sampling takes these; a family adds its own (its options.py's TIMESTEP_SAMPLINGS)
COMMON_TIMESTEP_SAMPLINGS = ("sigma", "uniform", "sigmoid", "shift", "flux_shift")
MODEL_PREDICTION_TYPES = ("raw", "additive", "sigma_scaled")
WEIGHTING_SCHEMES = ("sigma_sqrt", "logit_normal", "mode", "cosmap", "none", "uniform")

OPTIONS: tuple[Option, ...] = (
    Option("timestep_sampling", "str", "sigma", "How the noise level (sigma) of each image is drawn. 'sigma': from "
           "weighting_scheme's density over the schedule shifted by discrete_flow_shift; 'uniform': uniform in "
           "[0, 1); 'sigmoid': sigmoid of a normal draw times sigmoid_scale; 'shift': 'sigmoid' then shifted by "
           "discrete_flow_shift; 'flux_shift': 'sigmoid' then shifted by the image's size (sd-scripts' rule of that "
           "name).", "flow", choices=COMMON_TIMESTEP_SAMPLINGS),
    Option("sigmoid_scale", "float", 1.0, "Scale of the normal draw of timestep_sampling 'sigmoid', 'shift' and "
           "'flux_shift' (larger: closer to uniform).", "flow", min=0, advanced=True),
    Option("discrete_flow_shift", "float", 3.0, "The shift of timestep_sampling 'shift' and 'sigma' "
           "(sigma' = shift * sigma / (1 + (shift - 1) * sigma)).", "flow", min=0, advanced=True),
    Option("model_prediction_type", "str", "sigma_scaled", "What the transformer's output is taken for before the "
           "loss. 'raw': the velocity (noise - latents) as it is; 'additive': added to the noisy input; "
           "'sigma_scaled': noisy input - sigma x output, with weighting_scheme's loss weights (sd-scripts' default; "
           "its docs recommend 'raw').", "flow", choices=MODEL_PREDICTION_TYPES),
    Option("guidance_scale", "float", 3.5, "Guidance-distilled (dev) models: the guidance the model's guidance "
           "embedding is given while training; sd-scripts' docs recommend 1.0.", "flow", min=0),
    Option("weighting_scheme", "str", "uniform", "'logit_normal' and 'mode' draw the timesteps from that density "
           "(with timestep_sampling 'sigma'); 'none' and 'uniform': neither.", "flow", choices=WEIGHTING_SCHEMES,
           advanced=True),
    Option("logit_mean", "float", 0.0, "Mean of weighting_scheme 'logit_normal'.", "flow", advanced=True),
    Option("logit_std", "float", 1.0, "Standard deviation of weighting_scheme 'logit_normal'.", "flow", min=0,
           advanced=True),
    Option("mode_scale", "float", 1.29, "Scale of weighting_scheme 'mode'.", "flow", advanced=True),
    # sd-scripts' t5xxl_max_token_length (kohya imports and exports use that name): named for what it is, a
    # caption's length in text-encoder tokens, not for one encoder; distinct from sd-scripts' CLIP max_token_length
    Option("text_encoder_max_tokens", "int", None, "Tokens of each caption the long text encoder (T5-XXL) reads "
           "(sd-scripts' t5xxl_max_token_length; unset: the model's own length).", "flow", min=1, max=4096,
           nullable=True, advanced=True),
    Option("apply_t5_attn_mask", "bool", False, "Mask T5-XXL's padding tokens.", "flow", advanced=True),
    Option("text_encoder_batch_size", "int", None, "Captions encoded at once when cache_text_encoder_outputs caches "
           "them before training (unset: on a GPU as many as its free memory holds, at most 64; on a CPU 16). Larger "
           "is faster and needs more memory; the outputs are the same.",
           "flow", min=1, max=4096, nullable=True, advanced=True),
    # ai-toolkit's assistant_lora_path: a de-distillation LoRA for a step-distilled base (docs/distilled.md)
    Option("training_adapter", "str", "", "A distilled (turbo/schnell) base: the de-distillation training adapter, a "
           "LoRA .safetensors file (ai-toolkit's assistant_lora_path), applied to the frozen base while training and "
           "left out of every save and of the samples, so that the trained LoRA keeps the base's few-step speed. "
           "Validate names the adapter published for the model.", "flow", path="file"),
    Option("training_adapter_multiplier", "float", 1.0, "Weight of training_adapter while training.", "flow",
           advanced=True),
)
