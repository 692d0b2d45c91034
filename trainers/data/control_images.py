"""Each training sample's control image, fitted to its bucket exactly as its training image was: the same
resize, the same (random) crop and the same flip, drawn from the same per-sample generator."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from PIL import Image

from trainers.core.errors import ConfigError, ConfigIssue
from trainers.data.catalog import Catalog, CatalogImage
from trainers.data.controls import control_folder, missing_controls_message
from trainers.data.dataset import decode_sample, flip_of
from trainers.data.images import load_image_rgb, prepare_image
from trainers.data.kohya_folders import match_masks


def control_files(catalog: Catalog, conditioning_dir: Path) -> dict[Path, Path]:
    """The control image of each catalog image; ConfigError listing the images without one."""
    found: dict[Path, Path] = {}
    missing: list[str] = []
    for subset in catalog.subsets:
        images = [catalog.images[i].path for i in subset.images]
        folder = control_folder(conditioning_dir, subset.folder, subset.spec.kind == "kohya_root")
        matched, _ = match_masks(folder, images)
        found.update(matched)
        missing += [f"{subset.folder.name}/{path.name}" for path in images if path not in matched]
    if missing:
        raise ConfigError([ConfigIssue("conditioning_data_dir", missing_controls_message(missing), "loss")])
    return found


class ControlImages:
    """(B, 3, H, W) control images in [0, 1] (as diffusers' and sd-scripts' ControlNet training feed them) for a
    batch's sample keys (epoch, index)."""

    def __init__(self, catalog: Catalog, conditioning_dir: Path, seed: int) -> None:
        self.catalog, self.seed = catalog, seed
        self.files = control_files(catalog, conditioning_dir)
        self.sizes: dict[Path, tuple[int, int]] = {}

    def decoded_size(self, image: CatalogImage) -> tuple[int, int]:
        """The size the training image is decoded at (a large JPEG's reduced one): it decides the crop's range."""
        if image.path not in self.sizes:
            self.sizes[image.path] = decode_sample(image)[0].size
        return self.sizes[image.path]

    def __call__(self, keys: torch.Tensor) -> torch.Tensor:
        return torch.stack([self.one(int(epoch), int(index)) for epoch, index in keys.tolist()])

    def one(self, epoch: int, index: int) -> torch.Tensor:
        return self.fitted(self.files[self.catalog.images[self.catalog.samples[index]].path], epoch, index)

    def fitted(self, path: Path, epoch: int, index: int) -> torch.Tensor:
        """The image at `path` fitted to sample `index`'s bucket as its training image is, (3, H, W) in [0, 1]."""
        image = self.catalog.images[self.catalog.samples[index]]
        spec = self.catalog.subsets[image.subset].spec
        flip, gen = flip_of(spec.flip_aug, self.seed, epoch, index)
        size = self.decoded_size(image)
        control = load_image_rgb(path)
        if control.size != size:
            control = control.resize(size, resample=Image.Resampling.LANCZOS)
        width, height = image.bucket
        prepared = prepare_image(control, width, height, spec.random_crop, gen, flip)
        return (prepared.pixels + 1.0) / 2.0


def sample_control(path: Path, width: int, height: int) -> torch.Tensor:
    """A sample prompt's control image (--cn) as (1, 3, height, width) in [0, 1], stretched to the sample's size."""
    image = load_image_rgb(path).resize((width, height), resample=Image.Resampling.LANCZOS)
    return torch.from_numpy(np.asarray(image, dtype=np.float32) / 255.0).permute(2, 0, 1)[None].contiguous()
