"""kohya_ss's configs for SD3 and FLUX.1, read as kohya_ss passes them to sd-scripts (torch-free): its LoRA tab with
the FLUX checkbox (LoRA_type 'Flux1' -> flux_train_network.py) and its Dreambooth/Finetune tabs with the SD3
checkbox (-> sd3_train.py). The JSON holds every field of a tab; kohya_ss passes the family's ones under sd-scripts'
names (FLUX's layer fields as network_args), and also passes the noise and loss settings of SD models, which
sd-scripts' SD3 and FLUX trainers do not read: those are left out here with a note, so the config trains as it
did there.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from trainers.adapters.kohya.compat import SWITCH_FAMILIES
from trainers.adapters.kohya.keys import blank

FLUX_SWITCH, SD3_SWITCH = "flux1_checkbox", "sd3_checkbox"
FLUX_LORA_TYPE = "Flux1"
# GUI fields kohya_ss passes flux_train_network.py under their own names: the model's files and flow options.
FIELDS = ("ae", "clip_l", "t5xxl", "t5xxl_max_token_length", "guidance_scale", "apply_t5_attn_mask",
          "discrete_flow_shift", "model_prediction_type", "timestep_sampling", "blocks_to_swap")
# Its Flux1 LoRA type's network_args fields (lora_gui.py), passed when set.
NETWORK_FIELDS = ("img_attn_dim", "img_mlp_dim", "img_mod_dim", "single_dim", "txt_attn_dim", "txt_mlp_dim",
                  "txt_mod_dim", "single_mod_dim", "in_dims", "train_double_block_indices",
                  "train_single_block_indices")
# Its SD3 fields passed under their own names (sd3_train.py, sd3_train_network.py).
SD3_FIELDS = ("clip_l", "clip_g", "t5xxl", "weighting_scheme", "logit_mean", "logit_std", "mode_scale")
# Settings kohya_ss passes for every model that sd-scripts' SD3/FLUX trainers do not read (no noise offset, no SNR
# weighting, no clip skip or CLIP token chunks, timesteps from their own sampling).
UNREAD = ("min_snr_gamma", "noise_offset", "noise_offset_random_strength", "adaptive_noise_scale",
          "multires_noise_iterations", "multires_noise_discount", "debiased_estimation_loss",
          "scale_v_pred_loss_like_noise_pred", "v_pred_like_loss", "clip_skip", "max_token_length", "min_timestep",
          "max_timestep", "v_parameterization", "zero_terminal_snr")
# Memory savers of its FLUX tab: passed to sd-scripts' reading, which says each is ignored.
MEMORY_SAVERS = ("cpu_offload_checkpointing", "mem_eff_save", "fp8_base_unet")
REFUSED = {
    "train_t5xxl": "T5-XXL is never trained here; leave it off",
    "train_lora_ggpo": "LoRA-GGPO is not available; leave it off",
}


def is_flux_lora(raw: dict[str, Any]) -> bool:
    return raw.get(FLUX_SWITCH) is True and raw.get("LoRA_type") == FLUX_LORA_TYPE


def is_sd3(raw: dict[str, Any]) -> bool:
    """Any kohya_ss tab with its SD3 checkbox (sd3_train_network.py, sd3_train.py)."""
    return raw.get(SD3_SWITCH) is True


def read_flow(raw: dict[str, Any], method: str, get: Callable[..., Any], out: dict[str, Any], notes: list[str],
              refuse: Callable[[str, str], None]) -> None:
    """The SD3 or FLUX fields of a config that is one of them (else nothing)."""
    if method == "lora" and is_flux_lora(raw):
        flux_lora(get, out, notes, refuse)
    elif is_sd3(raw):
        sd3(get, out, notes, refuse)


def sd3(get: Callable[..., Any], out: dict[str, Any], notes: list[str], refuse: Callable[[str, str], None]) -> None:
    """The SD3 fields of a tab into `out`, as kohya_ss passes them to sd3_train.py / sd3_train_network.py (its LoRA
    tab names two of the files sd3_clip_l and sd3_t5xxl)."""
    if get("sd3_enable_scaled_pos_embed"):
        refuse("sd3_enable_scaled_pos_embed", "sd-scripts' scaled position embedding (enable_scaled_pos_embed) is not "
               "available; turn it off")
    for name in SD3_FIELDS:
        value = get(f"sd3_{name}") if name in ("clip_l", "t5xxl") and not blank(get(f"sd3_{name}")) else get(name)
        if not blank(value):
            out[name] = value
    out["model_family"] = SWITCH_FAMILIES[SD3_SWITCH]
    out["cache_text_encoder_outputs"] = bool(get("sd3_cache_text_encoder_outputs"))
    out["cache_text_encoder_outputs_to_disk"] = bool(get("sd3_cache_text_encoder_outputs_to_disk"))
    if any(not blank(get(name)) for name in ("learning_rate_te1", "learning_rate_te2")):
        notes.append("learning_rate_te1/te2 are not used: kohya_ss passes them (and train_text_encoder) to SDXL's "
                     "script only, so sd3_train.py trains the MMDiT alone")
    for name, field in (("t5xxl_dtype", "t5xxl_dtype"), ("text_encoder_batch_size", "sd3_text_encoder_batch_size")):
        if not blank(get(field)):  # kohya_ss passes both for SD3 only
            out[name] = get(field)
    _leave_out_unread(out, notes, "SD3")


def flux_lora(get: Callable[..., Any], out: dict[str, Any], notes: list[str],
              refuse: Callable[[str, str], None]) -> None:
    """The FLUX tab's fields into `out` (what kohya_ss writes in its --config_file), as kohya_ss passes them."""
    for name, why in REFUSED.items():
        if not blank(get(name)):
            refuse(name, why)
    for name in FIELDS + MEMORY_SAVERS:
        if not blank(get(name)):
            out[name] = get(name)
    out["cache_text_encoder_outputs"] = bool(get("flux1_cache_text_encoder_outputs"))
    out["cache_text_encoder_outputs_to_disk"] = bool(get("flux1_cache_text_encoder_outputs_to_disk"))
    args = [f"{name}={get(name)}" for name in NETWORK_FIELDS if not blank(get(name))]
    if get("split_qkv"):
        args.append("split_qkv=True")
    if get("split_mode"):  # kohya_ss forces single blocks with split_mode (a memory saver of sd-scripts)
        args.append("train_blocks=single")
        notes.append("split_mode (kohya_ss) is ignored: it is a memory saver; train_blocks = single, as kohya_ss "
                     "sets it with split_mode")
    out["network_args"] = [*(out.get("network_args") or []), *args] or None
    _leave_out_unread(out, notes, "FLUX")


def _leave_out_unread(out: dict[str, Any], notes: list[str], family: str) -> None:
    unread = [name for name in UNREAD if not blank(out.pop(name, None))]
    if unread:
        notes.append(f"{', '.join(unread)} (kohya_ss passes them for every model) are left out: sd-scripts' {family} "
                     "trainer does not read them")

# Every field of the FLUX tab read above (the others have the prefixes kohya_json knows as other-family fields).
KNOWN = frozenset((*FIELDS, *NETWORK_FIELDS, *MEMORY_SAVERS, *REFUSED, *SD3_FIELDS, "split_mode", "split_qkv", "t5xxl_dtype",
                   "t5xxl_device", "save_clip", "save_t5xxl"))
