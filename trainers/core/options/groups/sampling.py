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
)
