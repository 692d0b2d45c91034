"""LoRA's own rules (torch-free): its checks, its output file, its memory tips."""
from __future__ import annotations

from pathlib import Path

from trainers.core.errors import ConfigIssue
from trainers.core.options import TrainConfig

SUFFIX = ".safetensors"


def issues(cfg: TrainConfig) -> list[ConfigIssue]:
    found: list[ConfigIssue] = []

    def bad(name: str, message: str, group: str = "network") -> None:
        found.append(ConfigIssue(name, message, group))

    if cfg.network_train_unet_only and cfg.network_train_text_encoder_only:
        bad("network_train_text_encoder_only", "cannot be combined with network_train_unet_only: nothing would be "
            "trained")
    if cfg.conv_alpha is not None and cfg.conv_dim is None:
        bad("conv_alpha", "is set but conv_dim is not; set conv_dim to train the convolutions")
    if cfg.distributed_backend != "ddp":
        name = "DeepSpeed" if cfg.distributed_backend == "deepspeed" else "FSDP"
        bad("distributed_backend", f"{name} shards the weights, gradients or optimizer states of full finetunes; a "
            "LoRA's few weights train fastest with 'ddp' (they fit on every GPU): choose 'ddp'", "launch")
    if cfg.cache_text_encoder_outputs and not cfg.network_train_unet_only:
        bad("cache_text_encoder_outputs", "needs frozen text encoders: set network_train_unet_only = true, or turn "
            "caching off", "dataset")
    return found


def output_suffix(cfg: TrainConfig) -> str:
    return SUFFIX


def outputs(cfg: TrainConfig) -> list[Path]:
    return [Path(cfg.output_dir).expanduser() / f"{cfg.output_name}{SUFFIX}"]


def memory_tips(cfg: TrainConfig) -> list[str]:
    tips = []
    if not cfg.network_train_unet_only and not cfg.cache_text_encoder_outputs:
        tips.append("set network_train_unet_only = true with cache_text_encoder_outputs = true")
    if cfg.network_dim > 64:
        tips.append(f"lower network_dim (now {cfg.network_dim})")
    return tips
