"""A mask job: the segmentation model loaded once, then a grey mask (white: trained, black: left out of the loss) for
every image not done yet, at the image's size, in `masks_dir` laid out like `images` (what masked_loss reads as
conditioning_data_dir), and with `previews` the image with its mask over it in the job's folder."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from PIL import Image, ImageFilter

from trainers.caption.events import ImageResult
from trainers.caption.job import ImageJob, find_images, run_images, summary_report
from trainers.caption.loading import model_folder, torch_device, torch_dtype
from trainers.caption.mask_layout import MaskTargets, is_dataset_toml, mask_folders
from trainers.caption.options import JobConfig
from trainers.core.errors import ToolError
from trainers.core.fsio import atomic_path

PREVIEWS = "previews"
BACKGROUND_SIZE = 1024  # BiRefNet and RMBG-2.0 take 1024 x 1024 images
IMAGENET_MEAN, IMAGENET_STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


class ClipSeg:
    """CLIPSegForImageSegmentation: each image against each of the prompts, the largest value of a pixel kept."""

    def __init__(self, folder: Path, cfg: JobConfig, device: Any, dtype: Any) -> None:
        from transformers import AutoProcessor, CLIPSegForImageSegmentation

        self.prompts = [p.strip() for p in cfg.prompt.split("|") if p.strip()]
        self.device, self.dtype = device, dtype
        try:
            self.processor = AutoProcessor.from_pretrained(folder)
            self.model = CLIPSegForImageSegmentation.from_pretrained(folder, dtype=dtype).to(device).eval()
        except (OSError, ValueError, KeyError) as err:
            raise ToolError("model", f"{folder} does not load as CLIPSegForImageSegmentation: {err}") from None

    def __call__(self, images: list[Image.Image]) -> list[Any]:
        import torch

        n = len(self.prompts)
        inputs = self.processor(text=self.prompts * len(images), images=[im for im in images for _ in range(n)],
                                return_tensors="pt", padding=True).to(self.device)
        inputs["pixel_values"] = inputs["pixel_values"].to(self.dtype)
        with torch.inference_mode():
            logits = self.model(**inputs).logits.float().reshape(len(images), n, *inputs["pixel_values"].shape[-2:])
        return list(logits.sigmoid().amax(dim=1).cpu())


class Background:
    """A background-removal model of the BiRefNet class (RMBG-2.0 is one) through its own code: the last of its
    outputs is the foreground's logits."""

    def __init__(self, folder: Path, cfg: JobConfig, device: Any, dtype: Any) -> None:
        from transformers import AutoModelForImageSegmentation

        self.device, self.dtype = device, dtype
        try:
            self.model = AutoModelForImageSegmentation.from_pretrained(folder, trust_remote_code=True, dtype=dtype)
        except (OSError, ValueError, KeyError, ImportError) as err:
            raise ToolError("model", f"{folder} does not load as a background-removal model (BiRefNet class): "
                                     f"{err}") from None
        self.model = self.model.to(device).eval()

    def __call__(self, images: list[Image.Image]) -> list[Any]:
        import numpy as np
        import torch

        side = (BACKGROUND_SIZE, BACKGROUND_SIZE)
        arrays = [(np.asarray(im.resize(side, Image.Resampling.BILINEAR), dtype=np.float32) / 255 - IMAGENET_MEAN)
                  / IMAGENET_STD for im in images]
        pixels = torch.from_numpy(np.stack(arrays)).permute(0, 3, 1, 2).to(self.device, self.dtype)
        with torch.inference_mode():
            out = self.model(pixels)
        logits = out[-1] if isinstance(out, (list, tuple)) else getattr(out, "logits", out)
        return list(logits.float().sigmoid().reshape(len(images), *logits.shape[-2:]).cpu())


def to_mask(probs: Any, size: tuple[int, int], cfg: JobConfig) -> Image.Image:
    """A model's (H, W) probabilities as an 8-bit mask at the image's size: thresholded, grown or shrunk, inverted."""
    mask = Image.fromarray((probs.clamp(0, 1).numpy() * 255).round().astype("uint8"), "L")
    mask = mask.resize(size, Image.Resampling.BILINEAR)
    if cfg.threshold is not None:
        mask = mask.point(lambda v: 255 if v >= cfg.threshold * 255 else 0)
    if cfg.grow:
        shape = ImageFilter.MaxFilter if cfg.grow > 0 else ImageFilter.MinFilter
        mask = mask.filter(shape(2 * abs(cfg.grow) + 1))
    return mask.point(lambda v: 255 - v) if cfg.invert else mask


def overlay(image: Image.Image, mask: Image.Image) -> Image.Image:
    """The image, red where the loss ignores it (half-transparent, in proportion to how much it is ignored)."""
    red = Image.new("RGB", image.size, (255, 0, 0))
    return Image.composite(red, image, mask.point(lambda v: (255 - v) // 2))


def run(cfg: JobConfig, job: ImageJob) -> str:
    from trainers.dataset_edit.folders import DatasetEditError

    try:
        folders = mask_folders(cfg)
    except DatasetEditError as err:
        raise ToolError("images", str(err)) from None
    device = torch_device(cfg)
    model_class = ClipSeg if cfg.method == "clipseg" else Background
    model = model_class(model_folder(job), cfg, device, torch_dtype(cfg, device))
    targets = MaskTargets(folders, any_extension=is_dataset_toml(cfg.images))
    images = list(dict.fromkeys(image for folder in folders for image in find_images(folder.images)))
    targets.find_existing(images)
    previews = job.folder / PREVIEWS if cfg.previews and job.folder is not None else None

    def write(image: Path, target: Path, probs: Any, pil: Image.Image) -> ImageResult:
        mask = to_mask(probs, pil.size, cfg)
        with atomic_path(target) as tmp:  # in the format its name says (an existing mask may be a .jpg)
            mask.save(tmp, format=Image.registered_extensions().get(target.suffix.lower(), "PNG"))
        shown = None
        if previews is not None:
            shown = (previews / targets.preview_name(image)).with_suffix(".jpg")
            with atomic_path(shown, durable=False) as tmp:
                overlay(pil, mask).save(tmp, format="JPEG", quality=85)
        return ImageResult(image=str(image), written=str(target), preview=str(shown) if shown else None)

    for folder in folders:
        if not folder.named:
            job.warn(f"{folder.images}: its subset names no conditioning_data_dir, so its masks go to {folder.masks}; "
                     f"add conditioning_data_dir = \"{folder.masks}\" to that subset for masked_loss to read them")
    written = [str(folder.masks) for folder in folders]
    line = summary_report(job, run_images(job, targets, model, write, images), "masks",
                          {"method": cfg.method, "masks_dir": written[0] if len(written) == 1 else written})
    for folder in folders:
        job.wrote(folder.masks, "masks")
    return line
