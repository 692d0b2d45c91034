"""Options: Saving, training states and retention."""
from __future__ import annotations

from trainers.core.options.method_sets import FULL, LORA
from trainers.core.options.schema import Option
from trainers.core.registry import METHOD_NAMES

OPTIONS: tuple[Option, ...] = (
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
    Option("overwrite_output", "bool", False, "Allow replacing existing files in output_dir: the final "
           "<output_name>, and step and epoch saves (and their states) that this run, or the runs it resumes, did "
           "not write.", "saving", advanced=True),
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
    Option("metadata_title", "str", "", "Title written in the file's metadata (modelspec.title; default: "
           "output_name).", "saving", advanced=True),
    Option("metadata_author", "str", "", "Author written in the file's metadata (modelspec.author).", "saving",
           advanced=True),
    Option("metadata_description", "str", "", "Description written in the file's metadata (modelspec.description).",
           "saving", advanced=True),
    Option("metadata_license", "str", "", "License written in the file's metadata (modelspec.license).", "saving",
           advanced=True),
    Option("metadata_tags", "str", "", "Comma-separated tags written in the file's metadata (modelspec.tags).",
           "saving", advanced=True),
)
