"""FLUX.1 Kontext [dev] (diffusers FluxKontextPipeline): FLUX.1 dev whose token sequence also holds the input image's
latent tokens after the noisy ones, with position ids (1, row, column) where the image's own are (0, row, column),
as the pipeline builds them; the transformer's output for those tokens is dropped. LoRA files keep FLUX.1's names
(sd-scripts' and ComfyUI's lora_unet_double_blocks_...), which musubi-tuner also writes for Kontext."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from trainers.models.edit import EditFamily
from trainers.models.flow_latents import image_ids, pack_latents
from trainers.models.flux.family import Flux
from trainers.models.flux_kontext.rules import FluxKontextRules

REFERENCE_INDEX = 1.0  # the first position id of the input image's tokens (the pipeline's image_ids[..., 0] = 1)


class FluxKontext(EditFamily, FluxKontextRules, Flux):
    modelspec_architecture = "flux-1-dev"  # musubi-tuner writes Kontext LoRAs as FLUX.1 dev's

    def reference_tokens(self, noisy: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        tokens, ids = [], []
        for latents in self.references():
            height, width = latents.shape[-2:]
            tokens.append(pack_latents(latents.to(noisy.dtype)))
            own = image_ids(height // 2, width // 2, noisy.device, noisy.dtype)
            own[:, 0] = REFERENCE_INDEX
            ids.append(own)
        if not tokens:
            return super().reference_tokens(noisy)
        return torch.cat(tokens, dim=1), torch.cat(ids)

    def edit_inputs(self, images: Sequence[str], width: int, height: int) -> dict[str, Any]:
        """The input image at the sample's size (as training fits controls to their target), not the pipeline's
        preferred Kontext sizes, and the sample at the size asked for (the pipeline's max_area would resize it)."""
        return {**super().edit_inputs(images, width, height), "max_area": width * height, "_auto_resize": False}


FLUX_KONTEXT = FluxKontext()
