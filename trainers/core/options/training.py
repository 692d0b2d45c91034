"""Every training option, declared once. Names follow kohya sd-scripts where one exists."""
from __future__ import annotations

from trainers.core.options.schema import Option
from trainers.core.registry import FAMILY_NAMES, METHOD_NAMES, methods_training, only

LORA = methods_training("network")
FULL = methods_training("full")
DREAMBOOTH = only("dreambooth")

OPTIMIZERS = ("AdamW", "AdamW8bit", "Lion8bit", "Adafactor")
LR_SCHEDULERS = ("constant", "constant_with_warmup", "cosine", "cosine_with_restarts", "linear", "polynomial")

OPTIONS: tuple[Option, ...] = (
    # --- model ---
    Option("pretrained_model_name_or_path", "str", "", "Base model: a local diffusers folder, a hub id, or a "
           "single-file .safetensors/.ckpt checkpoint (SD1.x, SD2.x or SDXL).", "model", required=True, path="any"),
    Option("model_family", "str", "auto", "Model family; 'auto' detects it from the model files.", "model",
           choices=("auto", *FAMILY_NAMES), advanced=True),
    Option("v_parameterization", "bool", False, "Train with v-prediction. Models whose scheduler says "
           "v_prediction (SD2.x 768-v) use it even when this is off.", "model", advanced=True),
    Option("vae", "str", "", "Optional VAE to use instead of the model's own (a diffusers AutoencoderKL folder).",
           "model", path="dir", advanced=True),
    Option("clip_skip", "int", 1, "Use the output of the N-th text-encoder layer from the end (1 = last). "
           "SD1.x/SD2.x only.", "model", min=1, max=12, advanced=True),
    # --- dataset ---
    Option("train_data_dir", "str", "", "Folder holding <repeats>_<tokens> subfolders of images, e.g. '10_sks dog'. "
           "One of train_data_dir, metadata_dir or dataset_config is needed.", "dataset", path="dir"),
    Option("reg_data_dir", "str", "", "Regularization images, in <repeats>_<class> subfolders like train_data_dir. "
           "They are repeated (as sd-scripts does) until there are as many as training images an epoch.",
           "dataset", path="dir"),
    Option("prior_loss_weight", "float", 1.0, "Loss weight of the regularization images (1 = same as training "
           "images).", "dataset", min=0, advanced=True),
    Option("class_prompt", "str", "", "Dreambooth: prompt of the class images (e.g. 'a photo of a dog'). With "
           "num_class_images, the missing ones are generated with the base model into "
           "<reg_data_dir>/1_<class_prompt>/ before training (kept for later runs).", "dataset", methods=DREAMBOOTH),
    Option("num_class_images", "int", 0, "Dreambooth: how many class images reg_data_dir's class folder should "
           "hold; fewer are topped up by generating (0 = generate none).", "dataset", methods=DREAMBOOTH, min=0,
           max=100000),
    Option("dataset_config", "str", "", "An sd-scripts dataset config (TOML: [general], [[datasets]], "
           "[[datasets.subsets]] with image_dir, num_repeats, class_tokens, is_reg, ...). When set, train_data_dir, "
           "reg_data_dir and metadata_dir are ignored; the options here are its defaults.", "dataset", path="file",
           advanced=True),
    Option("caption_extension", "str", ".txt", "Extension of the caption file beside each image.", "dataset"),
    Option("caption_prefix", "str", "", "Text put before every caption (after shuffling; joined with a space).",
           "dataset", advanced=True),
    Option("caption_suffix", "str", "", "Text put after every caption (after shuffling; joined with a space).",
           "dataset", advanced=True),
    Option("shuffle_caption", "bool", False, "Shuffle the comma-separated tags of each caption every epoch.",
           "dataset"),
    Option("keep_tokens", "int", 0, "Keep the first N tags of each caption in place (never shuffled or dropped).",
           "dataset", min=0, max=255),
    Option("keep_tokens_separator", "str", "", "A marker such as '|||': tags before it stay in place, tags after it "
           "are shuffled/dropped, tags after a second marker stay at the end. Wins over keep_tokens.", "dataset",
           advanced=True),
    Option("caption_dropout_rate", "float", 0.0, "Share of samples trained with an empty caption (e.g. 0.05).",
           "dataset", min=0, max=1, advanced=True),
    Option("caption_tag_dropout_rate", "float", 0.0, "Share of tags left out of each caption (kept tags are never "
           "dropped).", "dataset", min=0, max=1, advanced=True),
    Option("resolution", "str", "512", "Training size: 'N' for NxN or 'W,H'. Multiples of 8.", "dataset"),
    Option("enable_bucket", "bool", False, "Aspect-ratio buckets: train each image at the bucket size nearest its "
           "aspect ratio (area up to the resolution's) instead of cropping it to the resolution.", "dataset"),
    Option("min_bucket_reso", "int", 256, "Smallest bucket side in pixels (at most the resolution's smaller side).",
           "dataset", min=32, max=8192, advanced=True),
    Option("max_bucket_reso", "int", 1024, "Largest bucket side in pixels (at least the resolution's larger side).",
           "dataset", min=32, max=8192, advanced=True),
    Option("bucket_reso_steps", "int", 64, "Bucket sides are multiples of this (a multiple of 8; 64 is safest).",
           "dataset", min=8, max=512, advanced=True),
    Option("bucket_no_upscale", "bool", False, "Never enlarge an image: small images get a bucket of their own size "
           "(rounded down to bucket_reso_steps) instead.", "dataset", advanced=True),
    Option("random_crop", "bool", False, "Crop at a random position instead of the center.", "dataset", advanced=True),
    Option("flip_aug", "bool", False, "Randomly flip images horizontally.", "dataset", advanced=True),
    Option("metadata_dir", "str", "", "Folder tree of JSON files, one per image: {\"path\": ..., \"tags\": [...], "
           "\"score\": N} (path relative to the JSON file). The caption is the tags; filters below apply.",
           "dataset", path="dir"),
    Option("dataset_repeats", "int", 1, "Repeats of the metadata_dir images an epoch.", "dataset", min=1, max=10000),
    Option("metadata_abs_min_score", "float", None, "Drop images whose score (as in the JSON) is below this.",
           "dataset", nullable=True, advanced=True),
    Option("metadata_min_score", "float", None, "Drop images whose score plus their metadata_tag_bonus is below this.",
           "dataset", nullable=True, advanced=True),
    Option("metadata_tag_bonus", "list", [], "Score bonus per tag for metadata_min_score, as 'tag=number', e.g. "
           "['masterpiece=2', 'sketch=-1'].", "dataset", advanced=True),
    Option("metadata_blacklist_tags", "list", [], "Drop images that have any of these tags.", "dataset",
           advanced=True),
    Option("metadata_remove_tags", "list", [], "Tags left out of the caption (the image is kept).", "dataset",
           advanced=True),
    Option("metadata_tag_replacements", "list", [], "Text replaced in every tag, as 'old->new' (spaces count), e.g. "
           "[' ->_', ':->=']. Tag filters match a tag as written or as replaced.", "dataset", advanced=True),
    Option("metadata_tag_separator", "str", ", ", "Text that joins the tags into the caption.", "dataset",
           advanced=True),
    Option("metadata_score_tags", "list", [], "Score thresholds, e.g. [5, 7, 9]: an image gets the tag 'scrN' (first) "
           "for the highest N its score reaches.", "dataset", advanced=True),
    Option("metadata_shuffle_tag_p", "float", 0.0, "Share of metadata images whose tags are shuffled each epoch "
           "(shuffle_caption shuffles all).", "dataset", min=0, max=1, advanced=True),
    Option("metadata_consider_every_nth", "int", 1, "Use only every n-th JSON file (sorted by path), e.g. 10 for a "
           "small validation set.", "dataset", min=1, max=1000000, advanced=True),
    Option("cache_latents", "bool", False, "Encode every image with the VAE once, before training, and keep the "
           "latents in memory (faster steps; not with random_crop). Each process encodes every image; "
           "cache_latents_to_disk splits the work.", "dataset"),
    Option("cache_latents_to_disk", "bool", False, "Cache latents in files beside the images (.atelier-cache/), "
           "reused by later runs while the VAE, size and crop stay the same; the work is split across processes.",
           "dataset"),
    Option("cache_text_encoder_outputs", "bool", False, "Encode each caption once, before training (needs frozen "
           "text encoders, e.g. network_train_unet_only, and fixed captions: no shuffle or dropout).", "dataset",
           advanced=True),
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
    # --- full-model training (dreambooth, finetune) ---
    Option("train_text_encoder", "bool", False, "Also train the text encoder(s), not only the UNet (more memory; "
           "learns new words better).", "training", methods=FULL),
    Option("stop_text_encoder_training", "int", None, "Freeze the text encoder(s) after this many steps and train "
           "the UNet alone from then on (unset: train them to the end).", "training", methods=DREAMBOOTH, min=1,
           nullable=True, advanced=True),
    Option("use_ema", "str", "off", "Keep an exponential moving average (EMA) of the trained weights: 'gpu' keeps "
           "the float32 copy in GPU memory (fast), 'cpu' in CPU memory (saves GPU memory, slower updates).",
           "training", methods=FULL, choices=("off", "gpu", "cpu")),
    Option("ema_decay", "float", 0.9999, "EMA decay per step (closer to 1 = slower, smoother average).", "training",
           methods=FULL, min=0, max=1, advanced=True),
    Option("ema_update_every", "int", 1, "Update the EMA every N optimizer steps (the decay is raised to the power "
           "N, so the average spans the same steps).", "training", methods=FULL, min=1, max=100000, advanced=True),
    Option("save_ema", "str", "ema", "With EMA, what to save: the EMA weights, the trained (non-EMA) weights, or both "
           "(<output_name> non-EMA and <output_name>-ema).", "training", methods=FULL,
           choices=("ema", "non_ema", "both"), advanced=True),
    Option("sample_with_ema", "bool", True, "With EMA, make sample images with the EMA weights.", "training",
           methods=FULL, advanced=True),
    # --- optimizer and schedule ---
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
    # --- sample images during training ---
    Option("sample_prompts", "str", "", "Prompts file: one prompt a line, with --n negative, --w/--h size, --s steps, "
           "--d seed, --l CFG scale (# lines skipped).", "sampling", path="file"),
    Option("sample_prompt_lines", "list", [], "Prompts written here instead (or as well), same syntax, one per line.",
           "sampling"),
    Option("sample_every_n_steps", "int", None, "Make sample images every N steps.", "sampling", min=1, nullable=True),
    Option("sample_every_n_epochs", "int", None, "Make sample images every N epochs.", "sampling", min=1,
           nullable=True),
    Option("sample_at_first", "bool", False, "Also make samples before the first step (the base model's look).",
           "sampling"),
    Option("sample_sampler", "str", "euler_a", "Sampler of the sample images.", "sampling",
           choices=("ddim", "euler", "euler_a", "dpmpp_2m")),
    Option("sample_steps", "int", 20, "Denoising steps of a sample unless its line says --s.", "sampling", min=1,
           max=1000, advanced=True),
    Option("sample_cfg_scale", "float", 7.0, "CFG scale of a sample unless its line says --l.", "sampling", min=0,
           max=50, advanced=True),
    # --- saving ---
    Option("output_dir", "str", "", "Folder the trained files are written to.", "saving", required=True, path="out"),
    Option("output_name", "str", METHOD_NAMES[0], "File name of the result, without extension (default: the "
           "method's name).", "saving", method_defaults=tuple((m, m) for m in METHOD_NAMES[1:])),
    Option("save_precision", "str", "fp16", "Precision of the saved weights.", "saving",
           choices=("float", "fp16", "bf16")),
    Option("save_model_as", "str", "diffusers", "Format of a full model: a diffusers folder <output_name>/, one "
           "single-file <output_name>.safetensors in the original layout (A1111, ComfyUI, Forge), or both.", "saving",
           methods=FULL, choices=("diffusers", "safetensors", "both")),
    Option("save_every_n_epochs", "int", None, "Also save every N epochs.", "saving", min=1, nullable=True),
    Option("save_every_n_steps", "int", None, "Also save every N steps.", "saving", min=1, nullable=True,
           advanced=True),
    Option("overwrite_output", "bool", False, "Allow replacing an existing <output_name> file in output_dir.",
           "saving", advanced=True),
    Option("training_comment", "str", "", "Free text stored in the LoRA's metadata (ss_training_comment).",
           "saving", methods=LORA, advanced=True),
    Option("save_state", "bool", False, "Also save a training state with every save: a <save name>-state folder "
           "(trained weights, optimizer, LR schedule, RNG, step and place in the epoch) that resume continues from as "
           "if the run had never stopped.", "saving"),
    Option("save_state_every_n_minutes", "float", 30.0, "Also save a rolling training state every N minutes (0 = "
           "never). Only the newest is kept, and it is removed when the run finishes: a crash or a killed process "
           "costs at most N minutes. Skipped with a warning when the disk is too full.", "saving", min=0),
    Option("resume", "str", "", "Continue from a training state: a '<name>-state' folder, or 'latest' for the newest "
           "state of output_name in output_dir. Restores the trained weights, optimizer, LR schedule, RNG, step and "
           "place in the epoch (the other options come from this config).", "saving"),
    Option("save_state_on_train_end", "bool", False, "Save a training state <output_name>-state at the end, to train "
           "on later (raise max_train_epochs or max_train_steps and resume from it).", "saving", advanced=True),
    Option("save_last_n_epochs", "int", None, "Keep only the newest N saves made every save_every_n_epochs; older "
           "ones are deleted (unset: keep all).", "saving", min=1, nullable=True, advanced=True),
    Option("save_last_n_steps", "int", None, "Keep only the step saves of the last N steps, e.g. 1000 with "
           "save_every_n_steps = 200 keeps 5; older ones are deleted (unset: keep all).", "saving", min=1,
           nullable=True, advanced=True),
    Option("save_last_n_epochs_state", "int", None, "Like save_last_n_epochs, for training states (unset: as "
           "save_last_n_epochs). The newest state is always kept.", "saving", min=1, nullable=True, advanced=True),
    Option("save_last_n_steps_state", "int", None, "Like save_last_n_steps, for training states (unset: as "
           "save_last_n_steps). The newest state is always kept.", "saving", min=1, nullable=True, advanced=True),
    Option("keep_every_n_saves", "int", None, "Saves that retention never deletes: every N-th save of its kind, e.g. "
           "5 with save_every_n_epochs = 2 keeps epochs 10, 20, 30... for good.", "saving", min=1, nullable=True,
           advanced=True),
    Option("nan_steps_before_stop", "int", 10, "Stop the run when the loss is NaN/inf this many steps in a row. "
           "Such updates are skipped, and weights that are not finite are never saved.", "saving", min=1,
           max=100000, advanced=True),
    # --- logging ---
    Option("logging_dir", "str", "", "Write TensorBoard logs to this folder (empty: no TensorBoard).",
           "logging", path="out"),
    # --- launch: flags of `accelerate launch`, not read by the trainer itself ---
    Option("num_processes", "int", 1, "Processes (GPUs) to train on. Each trains a share of every epoch.",
           "launch", min=1, max=64),
    Option("gpu_ids", "str", "", "GPUs to use, e.g. '0,1' (empty: the first num_processes GPUs).", "launch"),
    Option("num_machines", "int", 1, "Machines taking part in the run.", "launch", min=1, max=64, advanced=True),
    Option("machine_rank", "int", 0, "This machine's rank (0 on the main machine).", "launch", min=0, max=63,
           advanced=True),
    Option("main_process_ip", "str", "", "Address of the main machine (several machines only).", "launch",
           advanced=True),
    Option("main_process_port", "int", 29500, "Port of the main process for process communication.", "launch",
           min=1, max=65535, advanced=True),
    Option("distributed_backend", "str", "ddp", "How several processes share the work: 'ddp' copies the model to "
           "every GPU (best for LoRAs and models that fit); 'deepspeed' (ZeRO) shards optimizer states and gradients "
           "(full finetunes that do not fit; needs the deepspeed package); 'fsdp' shards the weights too (full "
           "finetunes only). DeepSpeed and FSDP go through a per-run accelerate config (accelerate.yaml).", "launch",
           choices=("ddp", "deepspeed", "fsdp"), advanced=True),
    Option("zero_stage", "int", 2, "DeepSpeed ZeRO stage: 1 shards optimizer states, 2 also gradients.", "launch",
           min=1, max=2, advanced=True),
    Option("offload_optimizer", "bool", False, "DeepSpeed: keep optimizer states in CPU memory and step them on the "
           "CPU (ZeRO-Offload; much less GPU memory, slower steps; needs optimizer_type = 'AdamW').", "launch",
           advanced=True),
    Option("ddp_gradient_precision", "str", "fp32", "DDP: precision of the gradients exchanged between processes each "
           "step. 'bf16' halves the traffic (the update itself stays in full precision); helps most across machines "
           "or GPUs without NVLink.", "launch", choices=("fp32", "bf16", "fp16"), advanced=True),
    Option("ddp_timeout", "int", 180, "Minutes a process waits for the others at a synchronisation point before the "
           "run fails. Long enough for uneven work such as caching latents, generating class images or saving a large "
           "model on a slow disk; a process that crashes stops the run at once regardless.", "launch", min=1,
           max=10080, advanced=True),
    Option("dynamo_backend", "str", "no", "torch.compile backend ('no' to skip compiling).", "launch",
           choices=("no", "inductor", "eager", "aot_eager"), advanced=True),
)

BY_NAME: dict[str, Option] = {o.name: o for o in OPTIONS}
assert len(BY_NAME) == len(OPTIONS), "option names must be unique"


def options_for(method: str) -> list[Option]:
    return [o.for_method(method) for o in OPTIONS if method in o.methods]
