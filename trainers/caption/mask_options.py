"""The options only mask jobs have (shared ones: shared_options.py; caption ones: options.py). Torch-free."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from trainers.caption.shared_options import SHARED_OPTIONS, job_option
from trainers.core.options.schema import Option

# method -> the model used when `model` is empty
METHODS: dict[str, str] = {
    "clipseg": "CIDAS/clipseg-rd64-refined",
    "background": "briaai/RMBG-2.0",
}
MASKS = ("masks",)

MASK_OPTIONS: tuple[Option, ...] = (
    SHARED_OPTIONS[0],
    job_option("method", "str", "clipseg", "clipseg: the parts of each image that match `prompt` (CLIPSegForImageSegmentation); "
         "background: the foreground, from a background-removal model (BiRefNet / RMBG-2.0 class, which ship their "
         "own code: needs trust_remote_code).", "input", MASKS, choices=tuple(METHODS)),
    job_option("model", "str", "", "A local model folder or a hub id; empty: the method's usual model (see "
         "docs/captioning.md).", "input", MASKS, path="any"),
    job_option("prompt", "str", "the main subject", "clipseg: what to keep, in words; several, separated by `|`, are "
         "joined (the largest value of each pixel wins).", "mask", MASKS),
    job_option("threshold", "float", None, "Make the mask black and white at this value (0-1); unset: keep the soft "
         "mask, which weighs the loss by the model's confidence.", "mask", MASKS, min=0, max=1, nullable=True),
    job_option("grow", "int", 0, "Widen the kept area by this many pixels (negative: shrink it).", "mask", MASKS,
         min=-256, max=256),
    job_option("invert", "bool", False, "Keep what the prompt names out of the loss instead (e.g. a watermark).", "mask",
         MASKS),
    job_option("masks_dir", "str", "", "Where the masks go: a folder laid out like `images` (the same subfolders and "
         "names, .png); training reads it as conditioning_data_dir with masked_loss. Empty: `<images>_masks` beside "
         "the images' folder. With a dataset .toml as `images`, leave it empty: each subset's masks go to its own "
         "conditioning_data_dir.", "output", MASKS, path="out"),
    SHARED_OPTIONS[1],
    job_option("previews", "bool", True, "Also write each image with its mask over it (red: left out of the loss) into the "
         "job's folder, to check the masks at a glance.", "output", MASKS),
    SHARED_OPTIONS[2],
    job_option("trust_remote_code", "bool", False, "Run the Python code a background-removal model ships (BiRefNet and "
         "RMBG-2.0 have no class in transformers). Only for a model you trust.", "input", MASKS, advanced=True),
    *SHARED_OPTIONS[3:],
)


def check_masks(cfg: Any, add: Callable[[str, str], None]) -> None:
    if cfg.existing == "append":
        add("existing", "a mask cannot be appended to: choose skip or overwrite")
    if cfg.method == "clipseg" and not cfg.prompt.strip():
        add("prompt", "clipseg needs a prompt: what the mask keeps, e.g. `a person`")
    if cfg.method == "background" and not cfg.trust_remote_code:
        add("trust_remote_code", "background-removal models (BiRefNet, RMBG-2.0) run the code they ship, which "
                                 "transformers has no class for: turn trust_remote_code on for a model you trust")
    from trainers.caption.mask_layout import is_dataset_toml, mask_folders
    from trainers.dataset_edit.folders import DatasetEditError

    if is_dataset_toml(cfg.images) and str(cfg.masks_dir).strip():
        add("masks_dir", "leave it empty with a dataset .toml: each subset's conditioning_data_dir says where its "
                         "masks go")
    if not cfg.images.strip() or not (Path(cfg.images).expanduser().is_dir() or is_dataset_toml(cfg.images)):
        return
    try:
        folders = mask_folders(cfg)
    except DatasetEditError as err:
        add("images", str(err))
        return
    for folder in folders:
        out, images = folder.masks.resolve(), folder.images.resolve()
        if out == images or out.is_relative_to(images):
            add("masks_dir", f"{out} is inside the images' folder {images}, where masks would be read as training "
                             "images; give a folder outside it")
