"""Options: Optimizer, learning rates, schedule, batch and length."""
from __future__ import annotations

from trainers.core.options.schema import Option

OPTIMIZERS = ("AdamW", "AdamW8bit", "Lion8bit", "Adafactor")
LR_SCHEDULERS = ("constant", "constant_with_warmup", "cosine", "cosine_with_restarts", "linear", "polynomial")

OPTIONS: tuple[Option, ...] = (
    Option("optimizer_type", "str", "AdamW", "Optimizer. 8-bit ones (bitsandbytes) save memory.", "optimizer",
           choices=OPTIMIZERS),
    Option("optimizer_args", "list", [], "Extra optimizer arguments as key=value, e.g. weight_decay=0.01.",
           "optimizer", advanced=True),
    Option("learning_rate", "float", 1e-4, "Learning rate (used where unet_lr / text_encoder_lr are unset).",
           "optimizer", min=0),
    Option("unet_lr", "float", None, "Learning rate of the UNet (of its LoRA in LoRA training).", "optimizer", min=0,
           nullable=True),
    Option("text_encoder_lr", "float", None, "Learning rate of the text encoder(s) (of their LoRA in LoRA "
           "training).", "optimizer", min=0, nullable=True),
    Option("lr_scheduler", "str", "constant", "How the learning rate changes over training.", "optimizer",
           choices=LR_SCHEDULERS),
    Option("lr_warmup_steps", "number", 0, "Warmup: a step count (>= 1), or a fraction of all steps (< 1). A count "
           "is in steps of a one-process run: when epochs set the length, P processes warm up for 1/P as many "
           "steps, the same share of training.", "optimizer", min=0),
    Option("lr_scheduler_num_cycles", "int", 1, "Restarts for cosine_with_restarts.", "optimizer", min=1,
           advanced=True),
    Option("lr_scheduler_power", "float", 1.0, "Power of the polynomial schedule.", "optimizer", min=0, advanced=True),
    Option("train_batch_size", "int", 1, "Images per step on each process (with keep_global_batch: on all processes "
           "together).", "optimizer", min=1, max=1024),
    Option("keep_global_batch", "bool", False, "train_batch_size is the global batch: each of P processes trains "
           "train_batch_size / P images a step, so any number of GPUs takes the same steps with the same batches "
           "as one GPU (only faster). Off: every process trains train_batch_size images, the global batch grows "
           "with P and an epoch takes fewer steps.", "optimizer", advanced=True),
    Option("gradient_accumulation_steps", "int", 1, "Steps whose gradients are summed before an update.",
           "optimizer", min=1, max=1024, advanced=True),
    Option("max_train_epochs", "int", None, "Epochs to train (wins over max_train_steps when both are set).",
           "optimizer", min=1, nullable=True),
    Option("max_train_steps", "int", None, "Optimizer steps to train, when epochs are unset.", "optimizer", min=1,
           nullable=True),
    Option("max_grad_norm", "float", 1.0, "Clip gradients to this norm (0 = no clipping).", "optimizer", min=0,
           advanced=True),
    Option("seed", "int", 42, "Seed for everything random: same seed, same result.", "optimizer", min=0),
)
