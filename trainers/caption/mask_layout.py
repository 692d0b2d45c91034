"""Which images a mask job masks and where each mask goes. `images` is a folder (its masks go to `masks_dir`, laid
out like it) or a dataset .toml: each image_dir subset's masks go to its own `conditioning_data_dir`, where a
masked_loss run reads them (an existing mask is found there as training finds it: the image's stem, any image
extension), or, for a subset without one, to `<image_dir>_masks` (the report says to name it). Torch-free."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainers.data.kohya_folders import match_masks


@dataclass(frozen=True)
class MaskFolder:
    images: Path  # a folder of images (with its subfolders)
    masks: Path  # where their masks go, laid out like `images`
    named: bool = True  # False: a dataset TOML subset without conditioning_data_dir (its default folder is used)


def masks_folder(cfg: Any) -> Path:
    """A folder job's masks folder: masks_dir, else `<images>_masks` beside the images' folder."""
    given = str(cfg.masks_dir).strip()
    images = Path(cfg.images).expanduser()
    return Path(given).expanduser() if given else images.parent / f"{images.name}_masks"


def is_dataset_toml(images: str) -> bool:
    path = Path(images.strip()).expanduser()
    return path.suffix.lower() == ".toml" and path.is_file()


def mask_folders(cfg: Any) -> list[MaskFolder]:
    """The folders a job masks, with where their masks go; a dataset .toml that does not load raises
    DatasetEditError naming the file and the problem."""
    if not is_dataset_toml(cfg.images):
        return [MaskFolder(Path(cfg.images).expanduser(), masks_folder(cfg))]
    from trainers.dataset_edit.folders import toml_concepts

    return [MaskFolder(c.folder, c.masks or c.folder.parent / f"{c.folder.name}_masks", c.masks is not None)
            for c in toml_concepts(Path(cfg.images).expanduser())]


class MaskTargets:
    """Each image's mask file: the one already in its folder's masks (for a dataset TOML's subset, any image
    extension), else `<masks>/<the image's path under its folder>.png`."""

    def __init__(self, folders: list[MaskFolder], any_extension: bool) -> None:
        self.folders, self.any_extension = folders, any_extension
        self._existing: dict[Path, Path] = {}

    def find_existing(self, images: list[Path]) -> None:
        """Look up the masks already written for `images` (once for the job: each folder is listed once)."""
        if not self.any_extension:
            return
        for folder in self.folders:
            self._existing |= match_masks(folder.masks, [i for i in images if i.is_relative_to(folder.images)])[0]

    def folder_of(self, image: Path) -> MaskFolder:
        return next(f for f in self.folders if image.is_relative_to(f.images))

    def __call__(self, image: Path) -> Path:
        if image in self._existing:
            return self._existing[image]
        folder = self.folder_of(image)
        return (folder.masks / image.relative_to(folder.images)).with_suffix(".png")

    def preview_name(self, image: Path) -> str:
        folder = self.folder_of(image)
        parts = image.relative_to(folder.images).parts
        return "__".join((folder.images.name, *parts) if len(self.folders) > 1 else parts)
