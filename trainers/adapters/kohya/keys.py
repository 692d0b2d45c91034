"""sd-scripts files read with sd-scripts' meaning (torch-free).

A file sd-scripts reads (a `--config_file` TOML, or what kohya_ss passes it for one of its JSON configs) may
hold keys of features Atelier lacks (refused, with the reason and what to use instead), keys of model families
Atelier does not train (one message for them all), and keys that need translating. Options such a file leaves
out take sd-scripts' default where ours would train differently. Every translation is said once, as a note.
"""
from __future__ import annotations

import difflib
from typing import Any

from trainers.core.errors import ConfigIssue
from trainers.core.options.groups.network import FUSED_LAYER_ARGS
from trainers.models.flux.options import NETWORK_ARGS as FLUX_NETWORK_ARGS
from trainers.adapters.kohya.compat import MODEL_TYPE_REFUSED, MODEL_TYPES_HERE
from trainers.core.options.training import BY_NAME
from trainers.core.registry import FAMILIES

ZERO3_WHERE = "DeepSpeed ZeRO-3 runs on NVIDIA GPUs; CPU processes refuse it"
# Key -> why it is refused and what to use instead. Refused only when set: an empty or off value loads quietly.
REFUSED: dict[str, str] = {
    "model_type": MODEL_TYPE_REFUSED,
    "train_inpainting": "inpainting models (a 9-channel UNet) are not trained here",
    "no_token_padding": "captions are always padded to the full token length here; leave it out",
    "debug_dataset": "it shows the dataset instead of training; `python -m trainers preflight --config FILE` checks a "
                     "dataset without training",
    "dataset_class": "custom dataset classes are not loaded; use train_data_dir, metadata_dir or dataset_config",
    "initial_epoch": "starting partway through is done by resuming a training state: save_state, then resume",
    "initial_step": "starting partway through is done by resuming a training state: save_state, then resume",
    "skip_until_initial_step": "starting partway through is done by resuming a training state: save_state, then "
                               "resume",
    "resume_from_huggingface": "training states are read from a local folder: download it and set resume to it",
    "block_lr": "per-block learning rates of a full finetune are not available (a LoRA has down_lr_weight, "
                "mid_lr_weight and up_lr_weight)",
    "offload_param_device": "DeepSpeed's parameter offload is not available: zero_stage = 3 shards the weights "
                            f"({ZERO3_WHERE}), offload_optimizer keeps optimizer states in CPU memory",
    "offload_optimizer_nvme_path": "NVMe offload is not available: offload_optimizer keeps optimizer states in CPU "
                                   "memory",
    "offload_param_nvme_path": "NVMe offload is not available: offload_optimizer keeps optimizer states in CPU memory",
    "zero3_init_flag": f"zero_stage = 3 ({ZERO3_WHERE}) loads the whole model on each process, then shards it; "
                       "leave it out",
    "zero3_save_16bit_model": f"set by Atelier itself when zero_stage = 3 ({ZERO3_WHERE}): saves gather the 16-bit "
                              "weights on rank 0; leave it out",
    "fp16_master_weights_and_gradients": "DeepSpeed keeps float32 master weights here; leave it out",
    "resize_interpolation": "images are resized with Atelier's own filter; leave it out",
    "conditioning_image_dir": "is not read by sd-scripts: ControlNet control images come from conditioning_data_dir",
}

ANIMA = ("an option of sd-scripts' Anima trainer, read only in its configs (a file that names network_module = "
         "'networks.lora_anima' or its qwen3 file)")
# Keys only sd-scripts' trainers of other model families read: one message names them all.
OTHER_FAMILIES: dict[str, frozenset[str]] = {
    # SD3 and FLUX train here from diffusers folders or sd-scripts' files (with clip_l, clip_g, t5xxl, ae), with the
    # flow options of sd-scripts (group [flow]); these keys of sd-scripts' SD3/FLUX trainers are not available (yet).
    "this SD3/FLUX option of sd-scripts is not available here": frozenset({
        "t5xxl_device", "t5xxl_lr", "split_mode",
        "train_t5xxl", "double_blocks_to_swap", "single_blocks_to_swap", "clip_g_dropout_rate",
        "clip_l_dropout_rate", "t5_dropout_rate", "enable_scaled_pos_embed", "pos_emb_random_crop_rate", "save_clip",
        "save_t5xxl", "use_t5xxl_cache_only", "learning_rate_te3", "num_last_block_to_freeze",
        "blockwise_fused_optimizers", "skip_latents_validity_check",
        "enable_all_linear", "ggpo_sigma", "ggpo_beta",
    }),
    "FLUX.1 layer choices are read from network_args, as sd-scripts' networks.lora_flux reads them (network_args = "
    "['train_blocks=single', 'img_attn_dim=8', ...])": frozenset(FLUX_NETWORK_ARGS),
    "split_qkv is read from network_args, as sd-scripts' networks.lora_flux and lora_sd3 read it (network_args = "
    "['split_qkv=True'])": frozenset(FUSED_LAYER_ARGS),
    ANIMA: frozenset({
        "qwen3_max_token_length", "t5_max_token_length", "unsloth_offload_checkpointing", "vae_disable_cache",
        "qwen_image_vae_2d", "llm_adapter_lr", "self_attn_lr", "cross_attn_lr", "mlp_lr", "mod_lr",
    }),
    # Read in the files of those trainers (sd_scripts_families: a Lumina file names networks.lora_lumina or its gemma2
    # file, a HunyuanImage file networks.lora_hunyuan_image or its byt5 file); anywhere else they mean nothing.
    "an option of sd-scripts' Lumina 2 or HunyuanImage 2.1 trainer, read only in their configs (a file that names "
    "network_module = 'networks.lora_lumina' or its gemma2 file, or 'networks.lora_hunyuan_image' or its byt5 file)":
    frozenset({
        "gemma2_max_token_length", "system_prompt", "use_flash_attn", "use_sage_attn", "attn_mode", "split_attn",
        "fp8_scaled", "fp8_vl", "text_encoder_cpu", "vae_chunk_size",
    }),
}
FAMILY_OF_KEY: dict[str, str] = {key: message for message, keys in OTHER_FAMILIES.items() for key in keys}
TRAINED_HERE = "Atelier trains " + ", ".join(family.title for family in FAMILIES)

# sd-scripts' network modules for families not trained here.
FAMILY_NETWORK_MODULES: dict[str, str] = {
    "networks.oft_flux": "sd-scripts' FLUX OFT is not available; use network_module = 'networks.lora'",
}
# network_module values of sd-scripts that are not ours -> why, and what to use.
NETWORK_MODULES: dict[str, str] = {
    "networks.loha": "sd-scripts' own LoHa is not available; use network_module = 'lycoris.kohya' with "
                     "network_args algo=loha",
    "networks.lokr": "sd-scripts' own LoKr is not available; use network_module = 'lycoris.kohya' with "
                     "network_args algo=lokr",
    "networks.lora_fa": "LoRA-FA is not available; use 'networks.lora'",
    "networks.oft": "sd-scripts' OFT is not available; use network_module = 'lycoris.kohya' with network_args "
                    "algo=diag-oft",
}
# network_args LyCORIS's kohya entry point does not read (kohya_ss passes them anyway): dropped, said once.
LYCORIS_UNREAD = ("rank_dropout_scale", "train_on_input")

# sd-scripts' defaults where ours would train (or sample) differently; applied to options an sd-scripts file
# leaves out. (Speed-only defaults such as data-loader workers keep ours.)
SD_SCRIPTS_DEFAULTS: dict[str, Any] = {
    "network_dim": 4,
    "network_alpha": 1.0,
    "learning_rate": 2e-6,
    "caption_extension": ".caption",
    "sample_sampler": "ddim",
    "sample_steps": 30,
    "sample_cfg_scale": 7.5,
}
SD_SCRIPTS_MAX_TRAIN_STEPS = 1600  # with neither max_train_steps nor max_train_epochs

# sd-scripts' sample samplers -> ours (sample images only; training is the same).
SAMPLERS: dict[str, str] = {
    "k_euler": "euler", "k_euler_a": "euler_a", "dpmsolver++": "dpmpp_2m", "dpmsolver": "dpmpp_2m",
    "pndm": "ddim", "lms": "euler", "k_lms": "euler", "heun": "euler", "dpm_2": "euler", "k_dpm_2": "euler",
    "dpm_2_a": "euler_a", "k_dpm_2_a": "euler_a", "dpmsingle": "dpmpp_2m",
}


def blank(value: Any) -> bool:
    """An empty or off value (what kohya_ss leaves out of the TOML it writes): '', false, 0, [], {} or none (also
    the text 'False' a kohya_ss config may hold for a flag)."""
    if value is None or value is False or value == "":
        return True
    if isinstance(value, (list, dict)):
        return not value
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return value == 0
    return isinstance(value, str) and value.strip().lower() in ("none", "", "false")


def refusals(flat: dict[str, Any]) -> tuple[list[ConfigIssue], set[str]]:
    """Issues for refused keys and other families' keys that are set, and every such key (set or not)."""
    issues: list[ConfigIssue] = []
    handled: set[str] = set()
    families: dict[str, list[str]] = {}
    module = flat.get("network_module")
    if isinstance(module, str) and module in FAMILY_NETWORK_MODULES:
        handled.add("network_module")
        families.setdefault(FAMILY_NETWORK_MODULES[module], []).append("network_module")
    for name, value in flat.items():
        if name in BY_NAME:
            continue
        if name == "model_type" and value in MODEL_TYPES_HERE:
            handled.add(name)
            continue
        if name in FAMILY_OF_KEY:
            handled.add(name)
            if not blank(value):
                families.setdefault(FAMILY_OF_KEY[name], []).append(name)
        elif name in REFUSED:
            handled.add(name)
            if not blank(value):
                issues.append(ConfigIssue(name, f"{name} = {show(value)} is refused: {REFUSED[name]}"))
    for message, keys in families.items():
        shown = ", ".join(f"network_module = {module!r}" if k == "network_module" else k for k in keys)
        issues.append(ConfigIssue(", ".join(keys), f"{message} (it sets {shown}); {TRAINED_HERE}"))
    return issues, handled


def ignored_keys_warning(names: list[str], candidates: Any, what: str) -> str:
    """One warning naming the keys of a kohya file that are nothing here, each near-miss with its likely key."""
    shown = []
    for name in names:
        guess = difflib.get_close_matches(name, list(candidates), n=1, cutoff=0.6)
        shown.append(f"{name!r} (did you mean {guess[0]!r}?)" if guess else repr(name))
    return f"{what} ignored: {', '.join(shown)}"


def show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
