"""Edit models (FLUX.1 Kontext, Qwen-Image-Edit): a LoRA (or finetune) learns an edit from pairs. Each training image
is the target; its control images (trainers/data/edit_pairs.py) are fitted to the target's bucket exactly as the
target is (musubi-tuner's default: the same size, crop and flip) or sized by its subset's no_resize_control /
control_resolution (musubi-tuner's options: the control's own aspect ratio), encoded by the VAE (its mode, as the pipelines
encode their input image), and enter the transformer beside the noisy target in its token sequence, as the family's
pipeline does at inference. The family's denoise drops the control tokens' output, so the loss sees only the
target's tokens.

`EditFamily` is the mixin of these families: `adapt_trainable` sets each step's control latents in its
`ControlSlot` around the method's objective, which its denoise reads; `edit_inputs` gives a sample prompt's --ci
images (Generate's input image) to its pipeline.
"""
from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch
from PIL import Image
from torch import nn

from trainers.core.errors import ConfigError, ConfigIssue
from trainers.data.catalog import Catalog
from trainers.data.control_images import ControlImages
from trainers.data.dataset import flip_of
from trainers.data.edit_pairs import control_folder, control_size, match_pairs, pair_issues, skipped_warnings
from trainers.data.images import load_image_rgb, prepare_image
from trainers.models.edit_rules import EditRules
from trainers.models.edit_texts import PairTexts
from trainers.models.flow_rules import SIZE_STEP


@dataclass
class ControlSlot:
    """The controls of the batch being trained (None outside steps), one tensor per reference: its latents
    (B, C, h, w) and its pixels (B, 3, H, W) in [0, 1] (for text encoders that read the images too)."""

    latents: list[torch.Tensor] | None = None
    pixels: list[torch.Tensor] | None = None


def catalog_controls(catalog: Catalog, max_controls: int, warnings: list[str]) -> dict[Path, tuple[Path, ...]]:
    """The controls of every catalog image; ConfigError naming what is missing or over the model's limit. Pairs with
    an unreadable image are left out (and named in `warnings`): their samples train with no weight."""
    found: dict[Path, tuple[Path, ...]] = {}
    issues: list[ConfigIssue] = []
    for subset in catalog.subsets:
        if subset.spec.controls is None:
            issues.append(ConfigIssue("control_directory", f"{subset.folder} has no control images: set "
                                      "control_directory (or conditioning_data_dir) to the folder of the images "
                                      "each edit starts from", "dataset"))
            continue
        folder = control_folder(subset.spec.controls, subset.folder, subset.spec.kind == "kohya_root")
        report = match_pairs([catalog.images[i].path for i in subset.images], folder, max_controls,
                             subset.spec.caption_extension)
        issues += pair_issues(report, "dataset_config" if subset.spec.label else "control_directory")
        warnings += skipped_warnings(report)
        found.update((pair.target, pair.controls) for pair in report.pairs)
    if issues:
        raise ConfigError(issues)
    return found


class EditControls(ControlImages):
    """Each batch's control latents, the controls fitted to their targets' buckets as the targets are (ControlNet's
    fitting, with a target's several controls from edit_pairs instead of its one control file)."""

    def __init__(self, catalog: Catalog, files: Mapping[Path, tuple[Path, ...]], seed: int) -> None:
        self.catalog, self.seed, self.pairs, self.sizes = catalog, seed, files, {}

    def fill(self, slot: ControlSlot, keys: torch.Tensor, family: Any, vae: nn.Module, device: torch.device,
             dtype: torch.dtype) -> torch.Tensor:
        """Put the batch's controls in `slot`: per reference its pixels and its latents as the transformer reads
        them. Returns 1 for the samples that have their pair, 0 for those left out."""
        rows = [(int(epoch), int(index)) for epoch, index in keys.tolist()]
        targets = [self.catalog.images[self.catalog.samples[index]].path for _, index in rows]
        counts = {len(self.pairs.get(target, ())) for target in targets} - {0}
        if len(counts) > 1:
            raise ConfigError([ConfigIssue("control_directory", "a batch mixes targets with different numbers of "
                                           "control images: give every target the same number, or set "
                                           "train_batch_size = 1", "dataset")])
        count = counts.pop() if counts else 0
        kept = torch.tensor([1.0 if target in self.pairs else 0.0 for target in targets])
        slot.pixels = [_stacked([self.control(self.pairs[target][number], epoch, index) if target in self.pairs
                                 else torch.full((3, *self._bucket(index)[::-1]), 0.5)
                                 for target, (epoch, index) in zip(targets, rows)]) for number in range(count)]
        slot.latents = [encode_controls(family, vae, pixels).to(device, dtype) for pixels in slot.pixels]
        return kept

    def control(self, path: Path, epoch: int, index: int) -> torch.Tensor:
        """A control (3, H, W) in [0, 1]: fitted to its target's bucket, or at the size its subset's
        no_resize_control / control_resolution give (centre-cropped, flipped with its target)."""
        image = self.catalog.images[self.catalog.samples[index]]
        spec = self.catalog.subsets[image.subset].spec
        if spec.control_sizing.fitted_to_target:
            return self.fitted(path, epoch, index)
        control = load_image_rgb(path)
        width, height = control_size(spec.control_sizing, control.size, SIZE_STEP)
        flip, _ = flip_of(spec.flip_aug, self.seed, epoch, index)
        return (prepare_image(control, width, height, flip=flip).pixels + 1.0) / 2.0

    def _bucket(self, index: int) -> tuple[int, int]:
        return self.catalog.images[self.catalog.samples[index]].bucket


def _stacked(controls: list[torch.Tensor]) -> torch.Tensor:
    """One reference's controls of a batch; ConfigError when controls of their own size differ."""
    sizes = {tuple(control.shape[-2:]) for control in controls}
    if len(sizes) > 1:
        listed = ", ".join(f"{w}x{h}" for h, w in sorted(sizes))
        raise ConfigError([ConfigIssue("no_resize_control", f"a batch holds controls of different sizes ({listed}) "
                                       "kept by no_resize_control / control_resolution: give the controls one size "
                                       "and aspect ratio, or set train_batch_size = 1", "loss")])
    return torch.stack(controls)


def encode_controls(family: Any, vae: nn.Module, pixels: torch.Tensor) -> torch.Tensor:
    """Control images (B, 3, H, W) in [0, 1] as the transformer reads them: the VAE's mode, shifted and scaled as
    the family's latents are."""
    with torch.no_grad():
        raw = vae.encode((pixels * 2 - 1).to(vae.device, vae.dtype)).latent_dist.mode()
    return family.vae_latents(raw, vae)


def sample_images(paths: Sequence[str], width: int, height: int) -> list[Image.Image]:
    """A sample's input images (--ci) resized to the sample's size, as training fits controls to their target."""
    return [load_image_rgb(Path(path).expanduser()).resize((width, height), resample=Image.Resampling.LANCZOS)
            for path in paths]


class EditFamily(EditRules):
    """The mixin of edit families (before their base family): see the module's doc."""

    slot: ControlSlot = ControlSlot()  # each loaded model's own (load)
    text_reads_images = False  # its text encoder reads the controls too (the caption's encoding is the pair's)

    def load(self, folder: Path, weight_dtype: torch.dtype, vae_path: str = "", random_init: bool = False) -> Any:
        model = super().load(folder, weight_dtype, vae_path, random_init)  # type: ignore[misc]
        family = copy.copy(model.family)
        family.slot = ControlSlot()
        return replace(model, family=family)

    def adapt_trainable(self, cfg: Any, session: Any, trainable: Any) -> Any:
        """The method's objective with each batch's control latents in the slot while it runs (the objective as it
        is for a family whose controls are optional when no subset names any)."""
        if self.controls_optional and all(subset.spec.controls is None for subset in session.catalog.subsets):
            return trainable
        warnings: list[str] = []
        controls = EditControls(session.catalog, catalog_controls(session.catalog, self.max_controls, warnings),
                                cfg.seed)
        for warning in warnings:
            session.events.warn(warning)
        self.slot = ControlSlot()  # this run's own (the family object is the run's configured copy)
        inner, slot = trainable.objective, self.slot
        if self.text_reads_images:  # a caption's encoding differs from pair to pair: none is kept for the next
            trainable.predictor.text_memo = None
        pairs = PairTexts(session, controls, self) if self.text_reads_images and cfg.cache_text_encoder_outputs \
            else None

        def objective(predictor: nn.Module, model: Any, batch: dict[str, Any], opts: Any,
                      weight_dtype: torch.dtype) -> torch.Tensor:
            device = next(model.unet.parameters()).device
            kept = controls.fill(slot, batch["keys"], self, model.vae, device, weight_dtype)
            if pairs is not None:
                batch = pairs.batch(batch["keys"], batch)
            try:
                return inner(predictor, model, {**batch, "loss_weights": batch["loss_weights"] * kept}, opts,
                             weight_dtype)
            finally:
                slot.latents = slot.pixels = None

        return replace(trainable, objective=objective)

    def edit_inputs(self, images: Sequence[str], width: int, height: int) -> dict[str, Any]:
        """The pipeline's `image`: the sample's input images at its size (one image alone, not in a list)."""
        if not images and self.needs_input_image:
            raise ValueError(f"{self.title} draws from an input image: give the prompt `--ci path` (Generate: "
                             "input_image)")
        if not images:
            return {}
        loaded = sample_images(images, width, height)
        return {"image": loaded[0] if len(loaded) == 1 else loaded}

    def references(self) -> list[torch.Tensor]:
        """The control latents of the step being trained (none while sampling: the pipeline adds its own)."""
        return self.slot.latents or []

