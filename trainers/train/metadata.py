"""What a saved file records about the run beyond its weights: sd-scripts' ss_* keys of the training settings,
the modelspec fields a user sets (title, author, ...), and the base model's hashes as A1111 computes them."""
from __future__ import annotations

import functools
import hashlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trainers.core.options import TrainConfig
from trainers.core.options.typed import ModelOptions, OptimizerOptions
from trainers.train.optim import optimizer_class

if TYPE_CHECKING:
    from trainers.train.session import Session

# sd-scripts' ss_* key -> our option of the same meaning (read with .get: an option may not exist for every method)
_SAME_AS_OPTION = {
    "ss_gradient_checkpointing": "gradient_checkpointing", "ss_gradient_accumulation_steps": "gradient_accumulation_steps",
    "ss_lr_warmup_steps": "lr_warmup_steps", "ss_lr_scheduler": "lr_scheduler", "ss_max_grad_norm": "max_grad_norm",
    "ss_noise_offset": "noise_offset", "ss_min_snr_gamma": "min_snr_gamma", "ss_scale_weight_norms": "scale_weight_norms",
    "ss_max_token_length": "max_token_length", "ss_color_aug": "color_aug", "ss_zero_terminal_snr": "zero_terminal_snr",
    "ss_multires_noise_iterations": "multires_noise_iterations", "ss_multires_noise_discount": "multires_noise_discount",
    "ss_adaptive_noise_scale": "adaptive_noise_scale", "ss_ip_noise_gamma": "ip_noise_gamma",
    "ss_debiased_estimation": "debiased_estimation_loss", "ss_loss_type": "loss_type",
    "ss_huber_schedule": "huber_schedule", "ss_huber_c": "huber_c", "ss_huber_scale": "huber_scale",
    "ss_noise_offset_random_strength": "noise_offset_random_strength",
    "ss_ip_noise_gamma_random_strength": "ip_noise_gamma_random_strength",
    "ss_validation_seed": "validation_seed", "ss_validation_split": "validation_split",
    "ss_max_validation_steps": "max_validation_steps", "ss_validate_every_n_epochs": "validate_every_n_epochs",
    "ss_validate_every_n_steps": "validate_every_n_steps",
}


def run_metadata(cfg: TrainConfig, session: "Session") -> dict[str, Any]:
    """The ss_* keys sd-scripts' train_network.py writes about the training settings (None values are left out)."""
    values: dict[str, Any] = {key: cfg.values.get(option) for key, option in _SAME_AS_OPTION.items()}
    opts, model = OptimizerOptions.of(cfg), ModelOptions.of(cfg)
    args = ",".join(opts.optimizer_args)
    optimizer = optimizer_class(opts)  # as sd-scripts records it: the class's module path, then its arguments
    values.update({
        "ss_optimizer": f"{optimizer.__module__}.{optimizer.__name__}" + (f"({args})" if args else ""),
        "ss_total_batch_size": session.plan.global_batch,
        "ss_num_batches_per_epoch": session.plan.steps_per_epoch * session.plan.gradient_accumulation_steps,
        "ss_full_fp16": False,
        "ss_lowram": False,
        "ss_num_validation_images": session.catalog.num_validation_images,
    })
    values.update(_model_names_and_hashes(model.pretrained_model_name_or_path, "sd"))
    if model.vae.strip():
        values.update(_model_names_and_hashes(model.vae, "vae"))
    return {k: v for k, v in values.items() if v is not None}


def _model_names_and_hashes(name: str, kind: str) -> dict[str, Any]:
    """ss_sd_model_hash / ss_new_sd_model_hash (and the VAE's) of a model file; a folder or hub id gets its name."""
    path = Path(name).expanduser()
    if not path.is_file():
        return {}
    legacy, full = file_hashes(str(path.resolve()), path.stat().st_mtime_ns)
    return {f"ss_{kind}_model_hash" if kind == "sd" else "ss_vae_hash": legacy,
            f"ss_new_{kind}_model_hash" if kind == "sd" else "ss_new_vae_hash": full}


@functools.lru_cache(maxsize=8)
def file_hashes(path: str, mtime_ns: int) -> tuple[str, str]:
    """A1111's old (8 hex digits of the sha256 of 64 KiB at 1 MiB) and new (sha256 of all) hash of a file, once."""
    legacy, full = hashlib.sha256(), hashlib.sha256()
    with open(path, "rb") as fh:
        fh.seek(0x100000)
        legacy.update(fh.read(0x10000))
        fh.seek(0)
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            full.update(chunk)
    return legacy.hexdigest()[:8], full.hexdigest()


def modelspec_fields(cfg: TrainConfig) -> dict[str, str | None]:
    """modelspec.* fields from the metadata_* options and the timestep range (None: not set)."""
    low, high = cfg.values.get("min_timestep"), cfg.values.get("max_timestep")
    fields = {name: (cfg.values.get(f"metadata_{name}") or "").strip() or None
              for name in ("title", "author", "description", "license", "tags")}
    fields["timestep_range"] = f"{low or 0},{high or 1000}" if low is not None or high is not None else None
    return {k: v for k, v in fields.items() if v is not None}
