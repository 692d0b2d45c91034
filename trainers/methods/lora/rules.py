"""LoRA's own rules (torch-free): its checks, its output file, its memory tips."""
from __future__ import annotations

from pathlib import Path

from trainers.core.errors import ConfigError, ConfigIssue
from trainers.core.optimizers import text_encoder_rates
from trainers.core.options import TrainConfig
from trainers.methods.lora.objective_rules import objective_issues
from trainers.methods.lora.settings import network_settings
from trainers.methods.textual_inversion.rules import new_word_issues
from trainers.quant.rules import quant_issues

SUFFIX = ".safetensors"


def issues(cfg: TrainConfig) -> list[ConfigIssue]:
    found: list[ConfigIssue] = []

    def bad(name: str, message: str, group: str = "network") -> None:
        found.append(ConfigIssue(name, message, group))

    if cfg.network_train_unet_only and cfg.network_train_text_encoder_only:
        bad("network_train_text_encoder_only", "cannot be combined with network_train_unet_only: nothing would be "
            "trained")
    try:
        settings = network_settings(cfg)
    except ConfigError as err:
        found += err.issues
    else:
        if settings.get("conv_alpha") is not None and settings.conv_dim is None:
            bad("conv_alpha", "is set but conv_dim is not; set conv_dim to train the convolutions")
    unet_lr = cfg.learning_rate if cfg.unet_lr is None else cfg.unet_lr
    te_lr = max(text_encoder_rates(cfg))
    trained = ([unet_lr] if not cfg.network_train_text_encoder_only else []) + \
        ([te_lr] if not cfg.network_train_unet_only else [])
    if not any(trained):
        bad("learning_rate", "every learning rate of what trains is 0: nothing would change (a group at 0 is left "
            "out of training, as in sd-scripts); set learning_rate, unet_lr or text_encoder_lr above 0", "optimizer")
    if cfg.dim_from_weights and not cfg.network_weights.strip():
        bad("dim_from_weights", "needs network_weights: the file whose ranks and alphas the network takes")
    if len(cfg.base_weights_multiplier) > len(cfg.base_weights):
        bad("base_weights_multiplier", f"has {len(cfg.base_weights_multiplier)} values for "
            f"{len(cfg.base_weights)} base_weights file(s): one value per file, in the same order")
    for value in cfg.base_weights_multiplier:
        try:
            float(value)
        except ValueError:
            bad("base_weights_multiplier", f"{value!r} is not a number")
    if cfg.distributed_backend == "deepspeed" or cfg.distributed_backend == "fsdp" and cfg.fsdp_version == 1:
        name = "DeepSpeed" if cfg.distributed_backend == "deepspeed" else "FSDP1"
        bad("distributed_backend", f"{name} shards the weights, gradients or optimizer states of full finetunes; a "
            "LoRA's few weights train fastest with 'ddp' (they fit on every GPU): choose 'ddp', or 'fsdp' with "
            "fsdp_version = 2 when the base model itself does not fit on one GPU", "launch")
    if cfg.fp8_base and cfg.mixed_precision == "no":
        bad("fp8_base", "computes in the mixed-precision dtype: set mixed_precision to 'bf16' (or 'fp16')", "precision")
    found += quant_issues(cfg)
    if cfg.cache_text_encoder_outputs and not cfg.network_train_unet_only:
        bad("cache_text_encoder_outputs", "needs frozen text encoders: set network_train_unet_only = true, or turn "
            "caching off", "dataset")
    return found + new_word_issues(cfg) + objective_issues(cfg)


def output_suffix(cfg: TrainConfig) -> str:
    return SUFFIX


def outputs(cfg: TrainConfig) -> list[Path]:
    final = Path(cfg.output_dir).expanduser() / f"{cfg.output_name}{SUFFIX}"
    word = cfg.token_string.strip()
    return [final] + ([diffusers_folder(final)] if cfg.values.get("save_diffusers_lora") else []) + \
        ([embedding_file(final, word)] if word else [])


def diffusers_folder(final: Path) -> Path:
    """Where save_diffusers_lora writes the final LoRA in diffusers' layout."""
    return final.with_name(final.name.removesuffix(SUFFIX) + "-diffusers")


def embedding_file(final: Path, word: str) -> Path:
    """Where pivotal tuning's final save writes the new word on its own: <output_name>_embeddings/<word>.safetensors
    (A1111 and ComfyUI name an embedding by its file)."""
    return final.with_name(final.name.removesuffix(SUFFIX) + "_embeddings") / f"{word}{SUFFIX}"


def memory_tips(cfg: TrainConfig) -> list[str]:
    tips = []
    if not cfg.network_train_unet_only and not cfg.cache_text_encoder_outputs:
        tips.append("set network_train_unet_only = true with cache_text_encoder_outputs = true")
    if cfg.network_dim > 64:
        tips.append(f"lower network_dim (now {cfg.network_dim})")
    return tips
