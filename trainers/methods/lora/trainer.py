"""LoRA training: the network on the frozen model, its file, and the pieces the shared loop needs."""
from __future__ import annotations

import json
import time
from pathlib import Path

import torch
from safetensors import SafetensorError

from trainers.core.options import ConfigError, ConfigIssue, TrainConfig, parse_resolution
from trainers.data.catalog import Catalog
from trainers.methods.lora.file_format import (
    DatasetDir,
    TrainingMetadata,
    build_metadata,
    read_lora_file,
    save_lora_file,
)
from trainers.methods.lora.network import LoRANetwork
from trainers.methods.lora.rules import SUFFIX
from trainers.models import LoadedModel
from trainers.models.single_file import SAVE_DTYPES
from trainers.train.diffusion import NoisePredictor
from trainers.train.method import Method, Trainable, freeze
from trainers.train.session import Session


def build_network(cfg: TrainConfig, model: LoadedModel) -> LoRANetwork:
    network = LoRANetwork(
        model.unet, model.text_encoders, unet_key_style=model.family.unet_key_style,
        network_dim=cfg.network_dim, network_alpha=cfg.network_alpha or cfg.network_dim,
        conv_dim=cfg.conv_dim, conv_alpha=cfg.conv_alpha,
        train_unet=not cfg.network_train_text_encoder_only, train_text_encoder=not cfg.network_train_unet_only,
    )
    if cfg.network_weights.strip():
        path = Path(cfg.network_weights).expanduser()
        try:
            network.load_kohya_state_dict(read_lora_file(path)[0])
        except (ValueError, OSError, SafetensorError) as err:
            raise ConfigError([ConfigIssue("network_weights", f"cannot start from {path}: {err}", "network")]) from None
    network.apply_to()
    return network


def metadata_for(cfg: TrainConfig, session: Session, network_epoch: int, step: int) -> dict[str, str]:
    catalog: Catalog = session.catalog
    width, height = parse_resolution(cfg.resolution)
    info = TrainingMetadata(
        family=session.model.family,
        v_parameterization=session.model.prediction_type == "v_prediction",
        sd_model_name=Path(cfg.pretrained_model_name_or_path).name or cfg.pretrained_model_name_or_path,
        network_dim=cfg.network_dim, network_alpha=cfg.network_alpha or cfg.network_dim,
        conv_dim=cfg.conv_dim, conv_alpha=cfg.conv_alpha,
        resolution=(width, height), epoch=network_epoch, num_epochs=session.plan.epochs, steps=step,
        max_train_steps=session.plan.total_steps, learning_rate=cfg.learning_rate,
        unet_lr=cfg.unet_lr, text_encoder_lr=cfg.text_encoder_lr,
        num_train_images=catalog.num_train_samples, num_reg_images=catalog.num_reg_samples,
        batch_size=session.plan.per_device_batch, output_name=cfg.output_name,
        clip_skip=cfg.clip_skip if session.model.family.supports_clip_skip else None,
        mixed_precision=cfg.mixed_precision, seed=cfg.seed, training_started_at=session.started_at,
        training_finished_at=time.time(),
        dataset_dirs={name: DatasetDir(**d) for name, d in catalog.dataset_dirs().items()},
        tag_frequency=catalog.tag_frequency(),
    )
    return {**build_metadata(info), **dataset_metadata(cfg, catalog), "ss_training_comment": cfg.training_comment}


def dataset_metadata(cfg: TrainConfig, catalog: Catalog) -> dict[str, str]:
    """sd-scripts' ss_* keys about the data (buckets, caption handling, regularization, caching)."""
    counts = catalog.bucket_counts()
    buckets = {str(i): {"resolution": [w, h], "count": n} for i, ((_, w, h), (_, n)) in enumerate(counts.items())}
    values = {
        "ss_enable_bucket": cfg.enable_bucket, "ss_min_bucket_reso": cfg.min_bucket_reso,
        "ss_max_bucket_reso": cfg.max_bucket_reso, "ss_bucket_no_upscale": cfg.bucket_no_upscale,
        "ss_bucket_info": json.dumps({"buckets": buckets}),
        "ss_reg_dataset_dirs": json.dumps(catalog.dataset_dirs(reg=True)), "ss_prior_loss_weight": cfg.prior_loss_weight,
        "ss_shuffle_caption": cfg.shuffle_caption, "ss_keep_tokens": cfg.keep_tokens,
        "ss_caption_dropout_rate": cfg.caption_dropout_rate, "ss_caption_tag_dropout_rate": cfg.caption_tag_dropout_rate,
        "ss_flip_aug": cfg.flip_aug, "ss_random_crop": cfg.random_crop,
        "ss_cache_latents": cfg.cache_latents or cfg.cache_latents_to_disk,
    }
    return {key: str(value) for key, value in values.items()}


class LoRAFile:
    """The LoRA output: one kohya-format .safetensors file with ss_* and modelspec metadata."""

    suffix = SUFFIX

    def __init__(self, cfg: TrainConfig, session: Session, network: LoRANetwork) -> None:
        self.cfg, self.session, self.network = cfg, session, network
        self.dtype = SAVE_DTYPES[cfg.save_precision]

    def save(self, path: Path, epoch: int, step: int) -> None:
        save_lora_file(path, self.network.kohya_state_dict(self.dtype), metadata_for(self.cfg, self.session, epoch, step))

    def nbytes(self) -> int:
        return sum(p.numel() for p in self.network.parameters()) * torch.empty((), dtype=self.dtype).element_size()


class LoRA(Method):
    def make_trainable(self, cfg: TrainConfig, session: Session) -> Trainable:
        model = session.model
        freeze(model.unet, model.vae, *model.text_encoders)
        network = build_network(cfg, model)
        train_te = not cfg.network_train_unet_only
        if cfg.full_bf16:
            network.to(torch.bfloat16)
        if train_te:
            for te in model.text_encoders:
                te.train()  # so gradient checkpointing and dropout behave as in training
        groups = []
        if network.unet_parameters():
            groups.append({"params": network.unet_parameters(), "lr": _lr(cfg.unet_lr, cfg)})
        if network.text_encoder_parameters():
            groups.append({"params": network.text_encoder_parameters(), "lr": _lr(cfg.text_encoder_lr, cfg)})
        predictor = NoisePredictor(model, network, cfg.clip_skip, train_text_encoder=train_te,
                                   text_encoders_cached=cfg.cache_text_encoder_outputs)
        return Trainable(model, predictor, groups, LoRAFile(cfg, session, network))


def _lr(value: float | None, cfg: TrainConfig) -> float:
    return cfg.learning_rate if value is None else value


METHOD = LoRA()
