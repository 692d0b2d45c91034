"""Full-weight training's rules (torch-free), shared by finetune and dreambooth: checks, outputs, memory tips."""
from __future__ import annotations

from pathlib import Path

from trainers.core.errors import ConfigIssue
from trainers.core.options import TrainConfig
from trainers.quant.rules import offload_issues

FORMATS = {"diffusers": [""], "safetensors": [".safetensors"], "both": ["", ".safetensors"]}  # save_model_as


def issues(cfg: TrainConfig) -> list[ConfigIssue]:
    found: list[ConfigIssue] = []
    if cfg.distributed_backend == "fsdp" and cfg.use_ema != "off":
        found.append(ConfigIssue("use_ema", "needs the whole weights on every process, which FSDP shards: set "
                                 "use_ema = 'off', or use distributed_backend = 'deepspeed' (ZeRO 1/2 keeps whole "
                                 "weights) or 'ddp'", "training"))
    if cfg.cache_text_encoder_outputs and cfg.train_text_encoder:
        found.append(ConfigIssue("cache_text_encoder_outputs", "needs frozen text encoders: set train_text_encoder = "
                                 "false, or turn caching off", "dataset"))
    return found + offload_issues(cfg)


def output_suffix(cfg: TrainConfig) -> str:
    """The name a save is announced under: the single file when that is all that is written, else the folder."""
    return ".safetensors" if cfg.save_model_as == "safetensors" else ""


def outputs(cfg: TrainConfig) -> list[Path]:
    """Every path the final save writes: the folder and/or single file, and the EMA copies."""
    out = Path(cfg.output_dir).expanduser()
    names = [cfg.output_name] + ([f"{cfg.output_name}-ema"] if cfg.use_ema != "off" and cfg.save_ema == "both" else [])
    return [out / f"{n}{s}" for n in names for s in FORMATS[cfg.save_model_as]]


def memory_tips(cfg: TrainConfig) -> list[str]:
    tips = []
    if cfg.mixed_precision == "bf16" and not cfg.full_bf16:
        tips.append("turn on full_bf16 (trained weights and gradients in bf16)")
    if cfg.use_ema == "gpu":
        tips.append("set use_ema = 'cpu' (the EMA copy leaves GPU memory)")
    if cfg.train_text_encoder:
        tips.append("set train_text_encoder = false")
    return tips
