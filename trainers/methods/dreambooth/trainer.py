"""Dreambooth: instance images plus class (regularization) images weighted by prior_loss_weight.

The data layer already mixes reg_data_dir images in with their loss weight; class images that
are missing are generated before training (trainers/class_images.py, called by the session).
Trains like a finetune; `stop_text_encoder_training` freezes the text encoders after N steps.
"""
from __future__ import annotations

from trainers.core.options import TrainConfig
from trainers.methods.finetune.trainer import make_trainable as finetune_trainable
from trainers.train.loop import Trainable
from trainers.train.session import Session


def make_trainable(cfg: TrainConfig, session: Session) -> Trainable:
    trainable = finetune_trainable(cfg, session)
    stop_at = cfg.stop_text_encoder_training
    text_encoders = list(session.model.text_encoders) if cfg.train_text_encoder else []
    if not stop_at or not text_encoders:
        return trainable
    te_params = [p for te in text_encoders for p in te.parameters()]
    frozen = False
    # One process (no DDP): stop computing the encoders' gradients at all. Under DDP the
    # parameters stay in the reducer (it waits for a gradient of every parameter it holds), so
    # their gradients are still computed and all-reduced but dropped before the optimizer step:
    # an optimizer skips a parameter whose grad is None (no momentum, no weight decay), so the
    # weights do not move. Rebuilding DDP mid-run would be the other way; this one is simpler.
    single = session.accelerator.num_processes == 1

    def after_step(step: int, announce: bool = True) -> None:
        nonlocal frozen
        if frozen or step < stop_at:
            return
        frozen = True
        if single:
            trainable.predictor.train_text_encoder = False
            for te in text_encoders:
                te.requires_grad_(False)
        if announce and session.accelerator.is_main_process:
            session.events.emit("info", message=f"text encoder training stopped at step {step}")

    def before_update() -> None:
        if frozen:
            for p in te_params:
                p.grad = None

    chained = trainable.after_step

    def after(step: int) -> None:
        if chained is not None:
            chained(step)
        after_step(step)

    restore = trainable.restore_extra_state

    def resumed(tensors: dict, step: int) -> None:
        """A run resumed after stop_text_encoder_training steps keeps the encoders frozen from its first step."""
        if restore is not None:
            restore(tensors, step)
        after_step(step, announce=False)

    trainable.after_step = after
    trainable.before_update = before_update
    trainable.restore_extra_state = resumed
    return trainable
