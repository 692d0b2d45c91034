"""Every training option, declared once. Names follow kohya sd-scripts where one exists."""
from __future__ import annotations

from .schema import Option

LORA = frozenset({"lora"})
FULL = frozenset({"dreambooth", "finetune"})

OPTIMIZERS = ("AdamW", "AdamW8bit", "Lion8bit", "Adafactor")
LR_SCHEDULERS = ("constant", "constant_with_warmup", "cosine", "cosine_with_restarts", "linear", "polynomial")

OPTIONS: tuple[Option, ...] = (
    # --- model ---
    Option("pretrained_model_name_or_path", "str", "", "Base model: a local diffusers folder or a hub id "
           "(SD1.x, SD2.x or SDXL).", "model", required=True, path="any"),
    Option("model_family", "str", "auto", "Model family; 'auto' detects it from the model files.", "model",
           choices=("auto", "sd1", "sd2", "sdxl"), advanced=True),
    Option("v_parameterization", "bool", False, "Train with v-prediction. Models whose scheduler says "
           "v_prediction (SD2.x 768-v) use it even when this is off.", "model", advanced=True),
    Option("vae", "str", "", "Optional VAE to use instead of the model's own (a diffusers AutoencoderKL folder).",
           "model", path="dir", advanced=True),
    Option("clip_skip", "int", 1, "Use the output of the N-th text-encoder layer from the end (1 = last). "
           "SD1.x/SD2.x only.", "model", min=1, max=12, advanced=True),
    # --- dataset ---
    Option("train_data_dir", "str", "", "Folder holding <repeats>_<tokens> subfolders of images, e.g. '10_sks dog'.",
           "dataset", required=True, path="dir"),
    Option("caption_extension", "str", ".txt", "Extension of the caption file beside each image.", "dataset"),
    Option("resolution", "str", "512", "Training size: 'N' for NxN or 'W,H'. Multiples of 8.", "dataset"),
    Option("random_crop", "bool", False, "Crop at a random position instead of the center.", "dataset", advanced=True),
    Option("flip_aug", "bool", False, "Randomly flip images horizontally.", "dataset", advanced=True),
    Option("max_data_loader_n_workers", "int", 2, "Processes that load images in the background (0 = in the "
           "training process).", "dataset", min=0, max=64, advanced=True),
    # --- network (LoRA) ---
    Option("network_dim", "int", 16, "LoRA rank: higher learns more detail, makes bigger files.", "network",
           methods=LORA, min=1, max=1024),
    Option("network_alpha", "float", 8.0, "LoRA alpha: the update is scaled by alpha / dim (0 means alpha = dim).",
           "network", methods=LORA, min=0),
    Option("conv_dim", "int", None, "Rank for the ResNet 3x3 convolutions (LoCon); unset to leave them alone.",
           "network", methods=LORA, min=1, max=1024, nullable=True, advanced=True),
    Option("conv_alpha", "float", None, "Alpha for the LoCon convolutions (default: conv_dim).", "network",
           methods=LORA, min=0, nullable=True, advanced=True),
    Option("network_weights", "str", "", "Start from the weights of an existing LoRA file (same rank).", "network",
           methods=LORA, path="file", advanced=True),
    Option("network_train_unet_only", "bool", False, "Train the UNet LoRA only (text encoder untouched).",
           "network", methods=LORA),
    Option("network_train_text_encoder_only", "bool", False, "Train the text-encoder LoRA only.", "network",
           methods=LORA, advanced=True),
    # --- optimizer and schedule ---
    Option("optimizer_type", "str", "AdamW", "Optimizer. 8-bit ones (bitsandbytes) save memory.", "optimizer",
           choices=OPTIMIZERS),
    Option("optimizer_args", "list", [], "Extra optimizer arguments as key=value, e.g. weight_decay=0.01.",
           "optimizer", advanced=True),
    Option("learning_rate", "float", 1e-4, "Learning rate (used where unet_lr / text_encoder_lr are unset).",
           "optimizer", min=0),
    Option("unet_lr", "float", None, "Learning rate of the UNet LoRA.", "optimizer", methods=LORA, min=0, nullable=True),
    Option("text_encoder_lr", "float", None, "Learning rate of the text-encoder LoRA.", "optimizer", methods=LORA,
           min=0, nullable=True),
    Option("lr_scheduler", "str", "constant", "How the learning rate changes over training.", "optimizer",
           choices=LR_SCHEDULERS),
    Option("lr_warmup_steps", "number", 0, "Warmup: a step count (>= 1), or a fraction of all steps (< 1).",
           "optimizer", min=0),
    Option("lr_scheduler_num_cycles", "int", 1, "Restarts for cosine_with_restarts.", "optimizer", min=1,
           advanced=True),
    Option("lr_scheduler_power", "float", 1.0, "Power of the polynomial schedule.", "optimizer", min=0, advanced=True),
    Option("train_batch_size", "int", 1, "Images per step on each process.", "optimizer", min=1, max=1024),
    Option("gradient_accumulation_steps", "int", 1, "Steps whose gradients are summed before an update.",
           "optimizer", min=1, max=1024, advanced=True),
    Option("max_train_epochs", "int", None, "Epochs to train (wins over max_train_steps when both are set).",
           "optimizer", min=1, nullable=True),
    Option("max_train_steps", "int", None, "Optimizer steps to train, when epochs are unset.", "optimizer", min=1,
           nullable=True),
    Option("max_grad_norm", "float", 1.0, "Clip gradients to this norm (0 = no clipping).", "optimizer", min=0,
           advanced=True),
    Option("seed", "int", 42, "Seed for everything random: same seed, same result.", "optimizer", min=0),
    Option("min_snr_gamma", "float", None, "Min-SNR loss weighting (5 is typical); unset for none.", "optimizer",
           min=0, nullable=True, advanced=True),
    Option("noise_offset", "float", 0.0, "Noise offset (e.g. 0.05) to learn darker and brighter images.",
           "optimizer", min=0, max=1, advanced=True),
    # --- precision and memory ---
    Option("mixed_precision", "str", "no", "Compute precision: bf16 on recent GPUs, fp16 on older ones.",
           "precision", choices=("no", "fp16", "bf16")),
    Option("full_bf16", "bool", False, "Keep trained weights and gradients in bf16 too (less memory; needs "
           "mixed_precision = bf16).", "precision", advanced=True),
    Option("gradient_checkpointing", "bool", False, "Recompute activations in the backward pass: much less "
           "memory, about 20% slower.", "precision"),
    Option("sdpa", "bool", True, "Use PyTorch scaled-dot-product attention (fast, memory-efficient).",
           "precision", advanced=True),
    Option("no_half_vae", "bool", False, "Keep the VAE in float32 (SDXL's VAE overflows in fp16 and always "
           "stays float32 under fp16).", "precision", advanced=True),
    # --- saving ---
    Option("output_dir", "str", "", "Folder the trained files are written to.", "saving", required=True, path="out"),
    Option("output_name", "str", "lora", "File name of the result, without extension.", "saving"),
    Option("save_precision", "str", "fp16", "Precision of the saved weights.", "saving",
           choices=("float", "fp16", "bf16")),
    Option("save_every_n_epochs", "int", None, "Also save every N epochs.", "saving", min=1, nullable=True),
    Option("save_every_n_steps", "int", None, "Also save every N steps.", "saving", min=1, nullable=True,
           advanced=True),
    Option("overwrite_output", "bool", False, "Allow replacing an existing <output_name> file in output_dir.",
           "saving", advanced=True),
    Option("training_comment", "str", "", "Free text stored in the LoRA's metadata (ss_training_comment).",
           "saving", methods=LORA, advanced=True),
    # --- logging ---
    Option("logging_dir", "str", "", "Write TensorBoard logs to this folder (empty: no TensorBoard).",
           "logging", path="out"),
)

BY_NAME: dict[str, Option] = {o.name: o for o in OPTIONS}
assert len(BY_NAME) == len(OPTIONS), "option names must be unique"


def options_for(method: str) -> list[Option]:
    return [o for o in OPTIONS if method in o.methods]
