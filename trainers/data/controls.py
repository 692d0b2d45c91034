"""Where a training image's control image is (torch-free): the file in conditioning_data_dir with its training
image's stem (any image extension), as sd-scripts reads `--conditioning_data_dir`; for a kohya train_data_dir,
conditioning_data_dir has the same <repeats>_<tokens> subfolders."""
from __future__ import annotations

from pathlib import Path

LISTED = 20  # missing control images named in a message


def control_folder(conditioning_dir: Path, subset_folder: Path, kohya_root: bool) -> Path:
    """Where a subset's control images are: the same-named subfolder for a kohya root (as sd-scripts)."""
    return conditioning_dir / subset_folder.name if kohya_root else conditioning_dir


def missing_controls_message(missing: list[str]) -> str:
    more = f" (and {len(missing) - LISTED} more)" if len(missing) > LISTED else ""
    return (f"has no control image for {len(missing)} training image(s): {', '.join(missing[:LISTED])}{more}. Give "
            "each training image a control image with its file name (any image extension) in the matching "
            "subfolder of conditioning_data_dir")
