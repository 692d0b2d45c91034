"""Options: Sample images during training."""
from __future__ import annotations

from trainers.core.options.schema import Option

OPTIONS: tuple[Option, ...] = (
    Option("sample_prompts", "str", "", "Prompts file: one prompt a line, with --n negative, --w/--h size, --s steps, "
           "--d seed, --l CFG scale, --cn control image (ControlNet) (# lines skipped).", "sampling", path="file"),
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
    Option("score_saves", "bool", False, "Score each save's sample images (prompt fidelity: image-text similarity; "
           "likeness: similarity to the training images), pick the best save, flag overfitting: <run>/scores.json "
           "and the saves' metadata (docs/scores.md). Needs sample prompts; loads score_model (and likeness_model) "
           "once per run, downloaded from the Hugging Face hub on first use.", "sampling"),
    Option("score_model", "str", "openai/clip-vit-large-patch14", "CLIP or SigLIP model (hub id or local folder) "
           "that scores prompt fidelity, and likeness unless likeness_model names another; about 1.7 GB to "
           "download once (a progress bar); offline and absent: a warning and no scores.", "sampling",
           advanced=True),
    Option("likeness_model", "str", "", "Model whose image embeddings score likeness to the training images: a "
           "CLIP/SigLIP or a DINOv2 (facebook/dinov2-base, about 350 MB to download once); empty: score_model.",
           "sampling", advanced=True),
    Option("best_save_rule", "str", "likeness_keep_fidelity", "How the best save is picked: "
           "likeness_keep_fidelity (the highest likeness among saves whose fidelity is within "
           "best_save_fidelity_margin of the best fidelity), likeness, fidelity, or validation_loss (the lowest).",
           "sampling", choices=("likeness_keep_fidelity", "likeness", "fidelity", "validation_loss"), advanced=True),
    Option("best_save_fidelity_margin", "float", 5.0, "likeness_keep_fidelity: a save keeps fidelity when its "
           "fidelity is at most this many percent below the best save's.", "sampling", min=0, max=100,
           advanced=True),
)
