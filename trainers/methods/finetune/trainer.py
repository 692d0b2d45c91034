"""Full finetune: the UNet (and optionally the text encoders) trained directly, saved as a diffusers folder."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import nn

from trainers.core.optimizers import text_encoder_rates
from trainers.core.options import TrainConfig
from trainers.methods.finetune.rules import output_suffix
from trainers.models import LoadedModel, save_full_model
from trainers.models.single_file import SAVE_DTYPES
from trainers.train.diffusion import NoisePredictor
from trainers.train.ema import EMA
from trainers.train.metadata import modelspec_fields
from trainers.train.method import Method, Trainable, freeze
from trainers.train.session import Session


def trained_modules(cfg: TrainConfig, session: Session) -> tuple[nn.Module, list[nn.Module]]:
    """(UNet, the text encoders that train): requires_grad on; everything else frozen."""
    model = session.model
    freeze(model.unet, model.vae, *model.text_encoders)
    model.family.finetuned_part(model.unet).requires_grad_(True)
    model.unet.train()
    text_encoders = list(model.text_encoders) if cfg.train_text_encoder else []
    for te in text_encoders:
        te.requires_grad_(True)
        te.train()  # so gradient checkpointing and dropout behave as in training
    if cfg.full_bf16:
        for m in (model.unet, *text_encoders):
            m.to(torch.bfloat16)
    return model.unet, text_encoders


def param_groups(cfg: TrainConfig, unet: nn.Module, text_encoders: list[nn.Module]) -> list[dict[str, Any]]:
    groups = [{"params": [p for p in unet.parameters() if p.requires_grad], "lr": _lr(cfg.unet_lr, cfg),
               "name": "unet"}]
    rates = text_encoder_rates(cfg)
    if len(rates) == 1:  # one group for every encoder (as training states of earlier runs hold it)
        te_params = [p for te in text_encoders for p in te.parameters() if p.requires_grad]
        return groups + ([{"params": te_params, "lr": rates[0], "name": "text_encoder"}] if te_params else [])
    for i, te in enumerate(text_encoders):  # one rate per encoder (SDXL: te1, te2)
        params = [p for p in te.parameters() if p.requires_grad]
        if params:
            groups.append({"params": params, "lr": rates[min(i, len(rates) - 1)], "name": f"text_encoder{i + 1}"})
    return groups


def _lr(value: float | None, cfg: TrainConfig) -> float:
    return cfg.learning_rate if value is None else value


class ModelFiles:
    """A full model's output: a diffusers folder and/or one single file, with an -ema copy when asked."""

    def __init__(self, cfg: TrainConfig, model: LoadedModel, ema: EMA | None) -> None:
        self.cfg, self.model, self.ema = cfg, model, ema
        self.suffix = output_suffix(cfg)
        self.dtype = SAVE_DTYPES[cfg.save_precision]
        self.formats = {"as_diffusers": cfg.save_model_as != "safetensors",
                        "as_single_file": cfg.save_model_as != "diffusers"}
        self.metadata = {f"modelspec.{k}": v for k, v in modelspec_fields(cfg).items()}

    def save(self, path: Path, epoch: int, step: int) -> None:
        cfg, model, ema = self.cfg, self.model, self.ema
        stem = path.with_name(path.name[:len(path.name) - len(self.suffix)])  # <name>: folder and/or <name>.safetensors
        if ema is None or cfg.save_ema in ("non_ema", "both"):
            save_full_model(model, stem, dtype=self.dtype, metadata=self.metadata, **self.formats)
        if ema is not None and cfg.save_ema in ("ema", "both"):
            ema_stem = stem.with_name(f"{stem.name}-ema") if cfg.save_ema == "both" else stem
            te_states = [ema.state_dict(f"text_encoder_{i}") if cfg.train_text_encoder else None
                         for i in range(len(model.text_encoders))]
            save_full_model(model, ema_stem, dtype=self.dtype, unet_state=ema.state_dict("unet"),
                            text_encoder_states=te_states, metadata=self.metadata, **self.formats)

    def nbytes(self) -> int:
        """Every format and copy a save writes, the VAE included (the single file holds it in save_precision)."""
        model = self.model
        item = torch.empty((), dtype=self.dtype).element_size()
        weights = sum(p.numel() for m in (model.unet, *model.text_encoders, model.vae) for p in m.parameters())
        copies = 2 if self.ema is not None and self.cfg.save_ema == "both" else 1
        return weights * item * copies * (int(self.formats["as_diffusers"]) + int(self.formats["as_single_file"]))


class Finetune(Method):
    def make_trainable(self, cfg: TrainConfig, session: Session) -> Trainable:
        model = session.model
        unet, text_encoders = trained_modules(cfg, session)
        groups = param_groups(cfg, unet, text_encoders)
        # Built after requires_grad is set: DDP then covers exactly the trained modules.
        predictor = NoisePredictor(model, None, cfg.clip_skip, train_text_encoder=bool(text_encoders),
                                   text_encoders_cached=cfg.cache_text_encoder_outputs, memoize=session.memoize_text)
        ema = build_ema(cfg, unet, text_encoders)
        return Trainable(model, predictor, groups, ModelFiles(cfg, model, ema), hooks=[ema] if ema else [])


def build_ema(cfg: TrainConfig, unet: nn.Module, text_encoders: list[nn.Module]) -> EMA | None:
    if cfg.use_ema == "off":
        return None
    modules = {"unet": unet, **{f"text_encoder_{i}": te for i, te in enumerate(text_encoders)}}
    return EMA(modules, cfg.ema_decay, cfg.ema_update_every, cfg.use_ema, for_sampling=cfg.sample_with_ema)


METHOD = Finetune()
