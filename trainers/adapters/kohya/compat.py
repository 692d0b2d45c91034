"""sd-scripts keys that are not options of ours: translated where we can, listed where not.

A flat kohya `--config_file` TOML loads as it is; nothing in it is dropped silently.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from trainers.core.errors import ConfigIssue
from trainers.core.options.groups.network import NETWORK_ARG_OPTIONS
from trainers.core.options.training import BY_NAME

# Key -> why it has no effect here. Loading such a key gives a warning naming it.
IGNORED: dict[str, str] = {
    "xformers": "attention always uses PyTorch SDPA here (option sdpa)",
    "mem_eff_attn": "attention always uses PyTorch SDPA here (option sdpa)",
    "sdxl": "the model family is detected from the model (option model_family)",
    "v2": "the model family is detected from the model (option model_family)",
    "lowram": "not needed: models load straight to their device",
    "highvram": "not needed: models load straight to their device",
    "log_with": "TensorBoard logging is always on (into logging_dir, else the run folder's logs/)",
    "face_crop_aug_range": "face-crop augmentation is not available",
    "caption_dropout_every_n_epochs": "use caption_dropout_rate",
    # Speed and memory only: the result is the same (or computed in higher precision), memory use may be higher.
    "lowvram": "not needed: models load straight to their device",
    "diffusers_xformers": "attention always uses PyTorch SDPA here (option sdpa)",
    "full_fp16": "trained weights stay float32 under fp16 autocast (more memory); the low-memory mode here is "
                 "full_bf16 with mixed_precision = 'bf16'",
    "fused_backward_pass": "the optimizer steps after the backward pass (more memory, same update)",
    "fused_optimizer_groups": "the optimizer steps after the backward pass (more memory, same update)",
    "cpu_offload_checkpointing": "checkpointed activations stay on the GPU (more memory)",
    "mem_eff_save": "checkpoints are saved the usual way (more memory while saving)",
    "disable_mmap_load_safetensors": "not needed: checkpoints are read with safetensors' own loader",
    "skip_cache_check": "latent caches are always checked against the VAE, image and bucket",
    "cache_info": "latent caches are always checked against the VAE, image and bucket",
    "ddp_gradient_as_bucket_view": "DDP is set up by Atelier (a few large gradient buckets)",
    "ddp_static_graph": "DDP is set up by Atelier (a few large gradient buckets)",
    "use_safetensors": "files are always written as safetensors",
    "no_metadata": "the metadata (ss_*, modelspec.*) is always written",
    "dynamo_mode": "torch.compile runs with its default mode (option dynamo_backend)",
    "dynamo_use_fullgraph": "torch.compile runs with its default settings (option dynamo_backend)",
    "dynamo_use_dynamic": "torch.compile runs with its default settings (option dynamo_backend)",
    # Logging, trackers and uploads: what is trained is the same.
    "log_prefix": "TensorBoard logs are named by the run",
    "log_tracker_name": "TensorBoard logs are named by the run",
    "log_tracker_config": "trackers other than TensorBoard are not available",
    "log_config": "the whole config is saved in the run folder (config.toml)",
    "wandb_run_name": "Weights & Biases logging is not available; TensorBoard logs go to logging_dir",
    "console_log_level": "train.log in the run folder holds the full log",
    "console_log_file": "train.log in the run folder holds the full log",
    "console_log_simple": "train.log in the run folder holds the full log",
    "huggingface_repo_id": "nothing is uploaded to the Hugging Face Hub; upload the saved files yourself",
    "huggingface_repo_type": "nothing is uploaded to the Hugging Face Hub; upload the saved files yourself",
    "huggingface_path_in_repo": "nothing is uploaded to the Hugging Face Hub; upload the saved files yourself",
    "huggingface_repo_visibility": "nothing is uploaded to the Hugging Face Hub; upload the saved files yourself",
    "save_state_to_huggingface": "nothing is uploaded to the Hugging Face Hub; upload the saved files yourself",
    "async_upload": "nothing is uploaded to the Hugging Face Hub; upload the saved files yourself",
    "output_config": "a config is not written back here; --print-config shows the resolved one",
    "config_file": "a config cannot name another config",
}

# sd-scripts' LoRA modules of SD3 and FLUX: ours is networks.lora for every family (the family names the keys).
FAMILY_LORA_MODULES = ("networks.lora_flux", "networks.lora_sd3")
MODEL_TYPES_HERE = ("flux", "chroma")  # sd-scripts' model_type values trained here (Chroma: trainers/adapters)
MODEL_TYPE_REFUSED = "only FLUX.1 (model_type = 'flux') and Chroma (model_type = 'chroma') are trained with it here"

# sd-scripts' model-type flags, and the family each one names (kohya_ss picks the script with them).
FAMILY_FLAGS: dict[str, str] = {"sdxl": "sdxl", "v2": "sd2"}
SDXL_FLAG = "sdxl"  # kohya_ss also names its SDXL fields after it (sdxl_no_half_vae, ...)
# Whether that Dreambooth script trains the text encoder unless told not to (train_db.py does; sdxl_train.py not).
DREAMBOOTH_TRAINS_TEXT_ENCODER: dict[str, bool] = {"sd1": True, "sd2": True, "sdxl": False, "sd3": False,
                                                   "flux": False}
# kohya_ss's model checkboxes for SD3 and FLUX, and the family each one names.
SWITCH_FAMILIES: dict[str, str] = {"sd3_checkbox": "sd3", "flux1_checkbox": "flux"}
# The LoRA module sd-scripts trains each flow family with (ours is networks.lora: the family names the keys);
# Chroma is FLUX.1's scripts with model_type = "chroma", Lumina 2 its own (lumina_train_network.py).
FAMILY_LORA_MODULE: dict[str, str] = {"flux": "networks.lora_flux", "sd3": "networks.lora_sd3",
                                      "chroma": "networks.lora_flux", "lumina2": "networks.lora_lumina",
                                      "anima": "networks.lora_anima"}
# Options only some families' scripts read (sd3_train_utils.py, flux_train_utils.py, lumina_train_util.py,
# train_util.py's add_dit_training_arguments, sdxl_train_util.py), by the families that read them.
_DIT = ("text_encoder_batch_size", "weighting_scheme", "logit_mean", "logit_std", "mode_scale", "blocks_to_swap")
_T5 = ("apply_t5_attn_mask", "text_encoder_max_tokens", "t5xxl_max_token_length", "clip_l", "t5xxl")
_FLUX = ("flux", "chroma")
FAMILY_ONLY: dict[str, tuple[str, ...]] = {
    **{name: ("sd3", *_FLUX, "lumina2", "anima") for name in _DIT},
    **{name: ("sd3", *_FLUX) for name in _T5},
    **{name: ("sd3",) for name in ("apply_lg_attn_mask", "training_shift", "clip_g", "t5xxl_dtype")},
    **{name: _FLUX for name in ("guidance_scale",)},
    **{name: (*_FLUX, "lumina2") for name in ("model_prediction_type",)},
    **{name: (*_FLUX, "lumina2", "anima") for name in ("discrete_flow_shift", "sigmoid_scale", "timestep_sampling",
                                                       "ae")},
    "text_encoder": ("lumina2", "anima"),
    **{name: ("anima",) for name in ("llm_adapter_path", "t5_tokenizer_path")},
    **{name: ("sdxl", "sd3", *_FLUX, "lumina2", "anima") for name in ("cache_text_encoder_outputs",
                                                              "cache_text_encoder_outputs_to_disk")},
}
# The flow families musubi-tuner trains and sd-scripts does not: the export names the tool that does.
MUSUBI_FAMILIES = ("zimage", "qwen_image", "qwen_image_edit", "qwen_image_edit_plus", "flux2", "krea2",
                   "flux_kontext")
NO_CLIP_SKIP = ("sdxl", "sd3", "flux")  # families whose sd-scripts scripts do not read clip_skip


def _save_model_as(value: Any, out: dict[str, Any], problems: list[str]) -> None:
    if value != "safetensors":
        problems.append(f"save_model_as = {value!r} is not supported; files are always written as safetensors")


def _text_length(value: Any, out: dict[str, Any], problems: list[str]) -> None:
    """sd-scripts' t5xxl_max_token_length: our text_encoder_max_tokens (named for what it is, not for T5)."""
    out["text_encoder_max_tokens"] = value


def _fp8_base_unet(value: Any, out: dict[str, Any], problems: list[str]) -> None:
    """sd-scripts' fp8 for the UNet or transformer only (the text encoders keep their dtype): our fp8 base."""
    if value:
        out["base_model_precision"] = "fp8"


TRANSLATED: dict[str, Callable[[Any, dict[str, Any], list[str]], None]] = {
    "save_model_as": _save_model_as,
    "fp8_base_unet": _fp8_base_unet,
    "t5xxl_max_token_length": _text_length,
}


def lift_network_args(flat: dict[str, Any], issues: list[ConfigIssue]) -> None:
    """network_args entries whose key is an option of ours (conv_dim=8, rank_dropout=0.1, ...) become that option,
    so the page shows them in their fields; the others stay in network_args for the network module."""
    entries = flat.get("network_args")
    if isinstance(entries, str):
        entries = [entries]
    if not isinstance(entries, list):
        return
    kept = []
    for entry in entries:
        key, sep, raw = str(entry).partition("=")
        key, raw = key.strip(), raw.strip()
        if not sep or key not in NETWORK_ARG_OPTIONS:
            kept.append(entry)
            continue
        if key in flat:
            issues.append(ConfigIssue("network_args", f"{key} is given both as an option and in network_args; "
                                      "keep one", "network"))
            continue
        flat[key] = _number(raw) if BY_NAME[key].kind in ("int", "float", "number") else raw
    flat["network_args"] = kept


def _number(text: str) -> Any:
    try:
        value = float(text)
    except ValueError:
        return text  # the option's check names it
    return int(value) if value.is_integer() else value
