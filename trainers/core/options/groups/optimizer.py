"""Options: Optimizer, learning rates, schedule, batch and length."""
from __future__ import annotations

from trainers.core.optimizers import CLASS_PATH, CLASS_PATH_HELP, OPTIMIZER_NAMES
from trainers.core.options.schema import Option
from trainers.core.schedules import SCHEDULERS

OPTIMIZER_HELP = (
    "Optimizer, as in sd-scripts (any case), or a module.Class path such as torch.optim.RMSprop (extra arguments: "
    "optimizer_args). 8-bit ones (bitsandbytes) save memory; Paged* ones page their state to CPU memory and run "
    "unpaged on a machine without CUDA. DAdapt*/Prodigy find the step size themselves: set learning_rate around "
    "1.0. Adafactor uses sd-scripts' defaults: relative_step=True, so it picks its own learning rate (learning_rate "
    "is only the first value shown, lr_scheduler becomes 'adafactor', unet_lr/text_encoder_lr are ignored); for a "
    "fixed rate give optimizer_args relative_step=False scale_parameter=False warmup_init=False. *ScheduleFree "
    "ones have no LR schedule (lr_scheduler and warmup are not used; warm up with optimizer_args warmup_steps=N). "
    "Differences from sd-scripts: Lion is bitsandbytes' 32-bit Lion (lion-pytorch is not installed; same "
    "algorithm), and CAME is a name here for came_pytorch.CAME.")
SCHEDULER_HELP = (
    "How the learning rate changes over training (the Validate report draws it). cosine_with_min_lr and "
    "warmup_stable_decay end at lr_scheduler_min_lr_ratio; warmup_stable_decay decays over lr_decay_steps; "
    "piecewise_constant follows lr_scheduler_args step_rules='1:10,0.1:20,0.01'; 'adafactor' is Adafactor's own "
    "(relative_step). sd-scripts also takes reduce_lr_on_plateau, cosine_warmup_with_min_lr and greedy but fails "
    "with them, so they are refused here.")

OPTIONS: tuple[Option, ...] = (
    Option("optimizer_type", "str", "AdamW", OPTIMIZER_HELP, "optimizer", choices=OPTIMIZER_NAMES,
           pattern=CLASS_PATH.pattern, pattern_help=CLASS_PATH_HELP),
    Option("optimizer_args", "list", [], "Extra optimizer arguments as key=value, one per entry, read as Python "
           "values like sd-scripts does: weight_decay=0.01, betas=0.9,0.99 (a tuple), relative_step=False. "
           "Validate lists the names each optimizer accepts.", "optimizer", advanced=True),
    Option("fused_optimizer", "str", "auto", "How AdamW/Adam update the weights: 'auto' in one fused kernel over "
           "all tensors where torch has one for their device and dtype (CUDA, CPU, MPS, XPU; floating-point "
           "weights all on one device), else torch's default loop; 'on' always fused (refused where torch has no "
           "fused kernel); 'off' torch's default loop (multi-tensor on CUDA, per-tensor on the CPU), to rule the fused "
           "kernel out. Other optimizers are "
           "left as they are; optimizer_args fused=/foreach= win. Not sd-scripts' fused_backward_pass (Adafactor).",
           "optimizer", choices=("auto", "on", "off"), advanced=True),
    Option("learning_rate", "float", 1e-4, "Learning rate (used where unet_lr / text_encoder_lr are unset).",
           "optimizer", min=0),
    Option("unet_lr", "float", None, "Learning rate of the UNet (of its LoRA in LoRA training).", "optimizer", min=0,
           nullable=True),
    Option("text_encoder_lr", "float", None, "Learning rate of the text encoder(s) (of their LoRA in LoRA "
           "training); two values (e.g. 5e-5, 2e-5) set a model's two text encoders apart, as in sd-scripts.",
           "optimizer", min=0, nullable=True, per_encoder=True),
    Option("lr_scheduler", "str", "constant", SCHEDULER_HELP, "optimizer", choices=SCHEDULERS),
    Option("lr_warmup_steps", "number", 0, "Warmup: a step count (>= 1), or a fraction of all steps (< 1). A count "
           "is in steps of a one-process run: when epochs set the length, P processes warm up for 1/P as many "
           "steps, the same share of training.", "optimizer", min=0),
    Option("lr_scheduler_num_cycles", "int", 1, "Restarts for cosine_with_restarts; cosine_with_min_lr and "
           "warmup_stable_decay make num_cycles / 2 cosine waves (1: one half wave down). Plain cosine takes "
           "lr_scheduler_args num_cycles=0.5 instead, as in sd-scripts.", "optimizer", min=1, advanced=True),
    Option("lr_scheduler_power", "float", 1.0, "Power of the polynomial schedule.", "optimizer", min=0, advanced=True),
    Option("lr_decay_steps", "number", 0, "Decay steps of warmup_stable_decay: a step count (>= 1, in steps of a "
           "one-process run like lr_warmup_steps), or a fraction of all steps (< 1).", "optimizer", min=0,
           advanced=True),
    Option("lr_scheduler_min_lr_ratio", "float", None, "The lowest learning rate as a fraction of the first, for "
           "cosine_with_min_lr (required there, or lr_scheduler_args min_lr=...) and warmup_stable_decay "
           "(unset: 0).", "optimizer", min=0, max=1, nullable=True, advanced=True),
    Option("lr_scheduler_timescale", "int", None, "Time scale of inverse_sqrt, in steps (unset: the warmup steps, "
           "or 10000 without warmup).", "optimizer", min=1, nullable=True, advanced=True),
    Option("lr_scheduler_args", "list", [], "Extra arguments of the schedule as key=value, e.g. num_cycles=0.5 "
           "(cosine), lr_end=1e-7 (polynomial), min_lr=1e-6 (cosine_with_min_lr), warmup_type=cosine / "
           "decay_type=linear (warmup_stable_decay), step_rules=1:10,0.1 (piecewise_constant); with "
           "lr_scheduler_type, that class's arguments.", "optimizer", advanced=True),
    Option("lr_scheduler_type", "str", "", "A scheduler class instead of lr_scheduler, as in sd-scripts: a "
           "module.Class path, or a torch.optim.lr_scheduler class name such as CosineAnnealingLR (arguments: "
           "lr_scheduler_args, e.g. T_max=100). It is stepped once per optimizer step; no warmup.", "optimizer",
           advanced=True),
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
    Option("seed", "int", 42, "Seed for everything random: same seed, same result.", "optimizer", min=0,
           max=2**32 - 1),
)
