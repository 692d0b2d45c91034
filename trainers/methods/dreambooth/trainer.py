"""Dreambooth: instance images plus class (regularization) images weighted by prior_loss_weight.

The data layer already mixes reg_data_dir images in with their loss weight; class images that
are missing are generated before the dataset is read (class_images.py, from `prepare`).
Trains like a finetune; `stop_text_encoder_training` freezes the text encoders after N steps.
"""
from __future__ import annotations

from typing import Any

from trainers.core.events import EventWriter, Info
from trainers.core.options import TrainConfig
from trainers.methods.finetune.trainer import Finetune
from trainers.train.method import StepHook, Trainable
from trainers.train.session import Session


class FreezeTextEncoders(StepHook):
    """stop_text_encoder_training: from step N on, the text encoders no longer change.

    One process (no DDP): their gradients are not computed at all any more. Under DDP the parameters
    stay in the reducer (it waits for a gradient of every parameter it holds), so their gradients are
    still computed and all-reduced but dropped before the optimizer step: an optimizer skips a parameter
    whose grad is None (no momentum, no weight decay), so the weights do not move. Rebuilding DDP
    mid-run would be the other way; this one is simpler.
    """

    def __init__(self, stop_at: int, trainable: Trainable, text_encoders: list[Any], single_process: bool,
                 events: EventWriter) -> None:
        self.stop_at, self.trainable, self.text_encoders = stop_at, trainable, text_encoders
        self.params = [p for te in text_encoders for p in te.parameters()]
        self.single, self.events = single_process, events
        self.frozen = False

    def after_backward(self) -> None:
        if self.frozen:
            for p in self.params:
                p.grad = None

    def after_step(self, step: int) -> None:
        if self._freeze(step):
            self.events.emit(Info(message=f"text encoder training stopped at step {step}"))

    def restore(self, tensors: dict, step: int) -> None:
        """A run resumed after stop_text_encoder_training steps keeps the encoders frozen from its first step."""
        self._freeze(step)

    def _freeze(self, step: int) -> bool:
        if self.frozen or step < self.stop_at:
            return False
        self.frozen = True
        if self.single:
            self.trainable.predictor.train_text_encoder = False
            for te in self.text_encoders:
                te.requires_grad_(False)
        return True


class Dreambooth(Finetune):
    def prepare(self, cfg: TrainConfig, accelerator: Any, events: EventWriter, weight_dtype: Any) -> None:
        """The class folder is complete before the dataset is read."""
        if cfg.num_class_images:
            from trainers.methods.dreambooth.class_images import generate_class_images

            generate_class_images(cfg, accelerator, events, weight_dtype)

    def make_trainable(self, cfg: TrainConfig, session: Session) -> Trainable:
        trainable = super().make_trainable(cfg, session)
        text_encoders = list(session.model.text_encoders) if cfg.train_text_encoder else []
        if cfg.stop_text_encoder_training and text_encoders:
            trainable.hooks.append(FreezeTextEncoders(cfg.stop_text_encoder_training, trainable, text_encoders,
                                                      session.accelerator.num_processes == 1, session.events))
        return trainable


METHOD = Dreambooth()
