"""LoRA training: the network on the frozen model, its file, and the pieces the shared loop needs."""
from __future__ import annotations

import contextlib
import json
import random
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ContextManager

import torch
from safetensors import SafetensorError

from trainers.core.fsio import read_safetensors_header
from trainers.core.optimizers import text_encoder_rates
from trainers.core.options import ConfigError, ConfigIssue, TrainConfig, parse_resolution
from trainers.data.catalog import Catalog
from trainers.methods.lora.base_weights import merge_base_weights
from trainers.methods.lora.dylora import DyLoRANetwork, DyLoRAUnits
from trainers.methods.lora.file_format import (
    DatasetDir,
    TrainingMetadata,
    build_metadata,
    read_lora_file,
    save_lora_file,
    with_hashes,
)
from trainers.methods.lora.lycoris_net import LycorisNetwork
from trainers.methods.lora.network import Dropouts, LoRANetwork
from trainers.methods.lora.objectives import objective_for
from trainers.methods.lora.params import LearningRates, param_groups
from trainers.methods.lora.rules import SUFFIX, diffusers_folder, embedding_file, outputs
from trainers.methods.lora.settings import NetworkSettings, network_settings
from trainers.methods.textual_inversion.embeddings import KeepOtherWords, NewWord, add_word
from trainers.methods.textual_inversion.rules import token_strings
from trainers.models import LoadedModel, ModelFamily
from trainers.models.single_file import SAVE_DTYPES
from trainers.train.diffusion import NoisePredictor
from trainers.train.metadata import modelspec_fields, run_metadata
from trainers.train.method import Method, StepHook, Trainable, freeze
from trainers.train.session import Session

Network = LoRANetwork | LycorisNetwork


def _weights_issue(message: str) -> ConfigError:
    return ConfigError([ConfigIssue("network_weights", message, "network")])


def build_network(cfg: TrainConfig, model: LoadedModel, settings: NetworkSettings) -> Network:
    """The network `network_module` names, attached to the model (weights from network_weights when given)."""
    style = model.family.unet_key_style
    train = {"train_unet": not cfg.network_train_text_encoder_only,
             "train_text_encoder": not cfg.network_train_unet_only}
    start = _start_weights(cfg, model.family)
    try:
        if settings.module == "lycoris.kohya":
            kwargs = {**settings.kwargs(), **({"dropout": str(settings.dropout)} if settings.dropout else {})}
            network: Network = LycorisNetwork(model.unet, model.text_encoders, model.vae, unet_key_style=style,
                                              network_dim=settings.dim, network_alpha=settings.alpha, kwargs=kwargs,
                                              **train)
        elif settings.module == "networks.dylora":
            network = DyLoRANetwork(model.unet, model.text_encoders, unet_key_style=style, network_dim=settings.dim,
                                    network_alpha=settings.alpha, conv_dim=settings.conv_dim,
                                    conv_alpha=settings.conv_alpha, unit=int(settings.extra.get("unit", "1")),
                                    seed=cfg.seed, **train)
        else:
            dropouts = Dropouts(settings.dropout, settings.get("rank_dropout"), settings.get("module_dropout"))
            modules_dim = LoRANetwork.modules_dim_from_state_dict(start) if cfg.dim_from_weights and start else None
            targets = model.family.lora_targets(model.unet)
            network = LoRANetwork(model.unet, model.text_encoders, unet_key_style=style, network_dim=settings.dim,
                                  network_alpha=settings.alpha, conv_dim=settings.conv_dim,
                                  conv_alpha=settings.conv_alpha, dropouts=dropouts, modules_dim=modules_dim,
                                  block_dims=settings.block_dims(style) if style != "own" else None,
                                  unet_targets=targets, target_dims=targets and model.family.lora_target_dims(
                                      targets, settings.extra, settings.dim), split_fused=settings.split_qkv,
                                  **train)
    except ValueError as err:  # a block list of the wrong length for this model, a unit that does not divide, ...
        raise ConfigError([ConfigIssue("network_args", str(err), "network")]) from None
    if start is not None:
        try:
            network.load_kohya_state_dict(start)
        except ValueError as err:
            raise _weights_issue(f"cannot start from {cfg.network_weights}: {err}") from None
    if isinstance(network, LoRANetwork):
        network.apply_to()
    return network


def _start_weights(cfg: TrainConfig, family: ModelFamily) -> dict[str, torch.Tensor] | None:
    if not cfg.network_weights.strip():
        return None
    path = Path(cfg.network_weights).expanduser()
    try:
        read_safetensors_header(path, whole=True)  # a cut file is named as such, before safetensors reads it
        state, metadata = read_lora_file(path)
        return family.lora_in_own_names(state, _number(metadata.get("ss_network_alpha")))  # also other tools' names
    except (ValueError, OSError, SafetensorError) as err:
        raise _weights_issue(f"cannot read {path}: {err}") from None


def _number(text: str | None) -> float | None:
    try:
        return float(text) if text else None
    except ValueError:  # "Dynamic" (a resized file's)
        return None


def learning_rates(cfg: TrainConfig, settings: NetworkSettings, key_style: str) -> LearningRates:
    te_lrs = text_encoder_rates(cfg)
    ratio = settings.get("loraplus_lr_ratio")
    return LearningRates(cfg.learning_rate if cfg.unet_lr is None else cfg.unet_lr, te_lrs,
                         settings.block_lr_weights(key_style) if settings.module == "networks.lora" else None,
                         settings.get("loraplus_unet_lr_ratio") or ratio,
                         settings.get("loraplus_text_encoder_lr_ratio") or ratio)


class MaxNorm(StepHook):
    """scale_weight_norms: after every optimizer step, modules whose update is too large are scaled down."""

    def __init__(self, network: Network, max_norm: float, session: Session) -> None:
        self.network, self.max_norm, self.session = network, max_norm, session
        self.last: tuple[int, float, float] = (0, 0.0, 0.0)

    def after_step(self, step: int) -> None:
        self.last = self.network.max_norm_regularize(self.max_norm)
        scaled, mean, top = self.last
        self.session.accelerator.log({"keys_scaled": scaled, "average_key_norm": mean, "max_key_norm": top},
                                     step=step)

    def progress(self) -> dict[str, Any]:
        scaled, mean, top = self.last
        return {"keys_scaled": scaled, "average_key_norm": round(mean, 6), "max_key_norm": round(top, 6)}


def metadata_for(cfg: TrainConfig, session: Session, settings: NetworkSettings, session_id: int, network_epoch: int,
                 step: int) -> dict[str, str]:
    catalog: Catalog = session.catalog
    width, height = parse_resolution(cfg.resolution)
    info = TrainingMetadata(
        family=session.model.family,
        v_parameterization=session.model.prediction_type == "v_prediction",
        sd_model_name=Path(cfg.pretrained_model_name_or_path).name or cfg.pretrained_model_name_or_path,
        network_dim=cfg.network_dim, network_alpha=cfg.network_alpha or cfg.network_dim,
        conv_dim=settings.conv_dim, conv_alpha=settings.conv_alpha, network_module=settings.module,
        network_args=settings.kwargs(), network_dropout=settings.dropout, session_id=session_id,
        modelspec=modelspec_fields(cfg), extra=run_metadata(cfg, session),
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


DIFFUSERS_WEIGHTS = "pytorch_lora_weights.safetensors"  # the file name diffusers' load_lora_weights(folder) reads


class LoRAFile:
    """The LoRA output: one kohya-format .safetensors file with ss_*, sshs_* and modelspec metadata."""

    suffix = SUFFIX

    def __init__(self, cfg: TrainConfig, session: Session, network: Network, settings: NetworkSettings,
                 word: NewWord | None = None) -> None:
        self.cfg, self.session, self.network, self.settings, self.word = cfg, session, network, settings, word
        self.dtype = SAVE_DTYPES[cfg.save_precision]
        self.session_id = random.Random(f"{cfg.seed}:{session.started_at}").randrange(2**32)

    def save(self, path: Path, epoch: int, step: int) -> None:
        tensors = self.network.kohya_state_dict(self.dtype)
        metadata = metadata_for(self.cfg, self.session, self.settings, self.session_id, epoch, step)
        bundled = self.word.bundled(self.dtype) if self.word is not None else {}  # pivotal tuning: A1111/Forge's way
        named = {**self.session.model.family.lora_file(tensors, self.session.model), **bundled}
        save_lora_file(path, named, with_hashes(named, metadata))
        for part_path, part in self.session.model.family.lora_file_parts(path, named).items():
            save_lora_file(part_path, part, with_hashes(part, metadata))  # one file per model (Wan 2.2's experts)
        final = path == outputs(self.cfg)[0]
        if self.word is not None and final:  # and on its own, for diffusers' load_textual_inversion and ComfyUI
            save_lora_file(embedding_file(path, self.word.word), self.word.embedding_file(self.dtype),
                           {"ss_token_string": self.word.word, "ss_output_name": self.cfg.output_name})
        if self.cfg.save_diffusers_lora and final:
            self._save_diffusers(tensors, diffusers_folder(path))

    def _save_diffusers(self, tensors: dict[str, torch.Tensor], folder: Path) -> None:
        """The final LoRA in diffusers' layout (alpha folded in), written into a temporary folder moved into place."""
        from trainers.core.fsio import atomic_dir

        model = self.session.model
        state = model.family.lora_for_pipeline({k: v.float() for k, v in tensors.items()}, model)
        with atomic_dir(folder, may_replace=lambda f: (f / DIFFUSERS_WEIGHTS).exists(),
                        kind="a diffusers LoRA folder") as tmp:
            save_lora_file(tmp / DIFFUSERS_WEIGHTS, {k: v.to(self.dtype) for k, v in state.items()},
                           {"format": "pt"})

    def nbytes(self) -> int:
        vectors = 2 * sum(v.numel() for v in self.word.vectors()) if self.word is not None else 0
        weights = sum(p.numel() for p in self.network.parameters()) + vectors
        return weights * torch.empty((), dtype=self.dtype).element_size()


class LoRA(Method):
    def make_trainable(self, cfg: TrainConfig, session: Session) -> Trainable:
        model = session.model
        settings = network_settings(cfg)
        freeze(model.unet, model.vae, *model.text_encoders)
        word = add_word(model, cfg.token_string.strip(), token_strings(cfg), cfg.init_word) \
            if cfg.token_string.strip() else None  # pivotal tuning: a new word learned with the LoRA
        if cfg.base_weights:
            merged = merge_base_weights(model, cfg.base_weights, [float(v) for v in cfg.base_weights_multiplier])
            if session.accelerator.is_main_process:
                print(f"merged base_weights into the model: {', '.join(merged)}", flush=True)
        network = build_network(cfg, model, settings)
        train_te = not cfg.network_train_unet_only
        if cfg.full_bf16:
            network.to(torch.bfloat16)
        if train_te:
            for te in model.text_encoders:
                te.train()  # so gradient checkpointing and dropout behave as in training
        style = model.family.unet_key_style
        groups = param_groups(network.named_modules_for_kohya(), learning_rates(cfg, settings, style), style)
        groups += word_groups(cfg, word) if word is not None else []
        predictor = NoisePredictor(model, network, cfg.clip_skip, train_text_encoder=train_te or word is not None,
                                   text_encoders_cached=cfg.cache_text_encoder_outputs, memoize=session.memoize_text)
        hooks: list[StepHook] = [KeepOtherWords(word)] if word is not None else []
        if isinstance(network, DyLoRANetwork):
            hooks.append(DyLoRAUnits(network))
        if cfg.scale_weight_norms:
            hooks.append(MaxNorm(network, cfg.scale_weight_norms, session))
        return Trainable(model, predictor, groups, LoRAFile(cfg, session, network, settings, word), hooks=hooks,
                         objective=objective_for(cfg, network, model), without_output=lambda: switched_off(network),
                         at_multiplier=lambda weight: multiplied(network, weight))


def switched_off(network: Network) -> ContextManager[None]:
    """The network at multiplier 0 for the block (the base model's image for the save health check)."""
    return multiplied(network, 0.0)


@contextlib.contextmanager
def multiplied(network: Network, weight: float) -> Iterator[None]:
    """The network at multiplier `weight` for the block (a paused run's live render), 1 again afterwards."""
    network.set_multiplier(weight)
    try:
        yield
    finally:
        network.set_multiplier(1.0)


def word_groups(cfg: TrainConfig, word: NewWord) -> list[dict[str, Any]]:
    """The new word's vectors in each text encoder, at embedding_lr (else that encoder's text_encoder_lr)."""
    rates = [cfg.embedding_lr] if cfg.embedding_lr is not None else text_encoder_rates(cfg)
    return [{"params": [weight], "lr": rates[min(i, len(rates) - 1)], "name": f"embedding{i + 1}"}
            for i, weight in enumerate(word.parameters())]


METHOD = LoRA()
