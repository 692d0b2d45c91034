"""Image and text embeddings of the score models (transformers' CLIP / SigLIP, or DINOv2 for likeness).

A model is a hub id or a local folder; a hub id is fetched once into the Hugging Face cache with its download's
progress bar (`fetch`), and an absent model with the hub offline is a `ModelMissing` naming it, never a crash.
Every embedding comes back L2-normalised, so a dot product is the cosine similarity.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

_PATTERNS = ["*.json", "*.txt", "*.safetensors", "*.model", "*.tiktoken"]  # configs, tokenizers, weights


class ModelMissing(Exception):
    """A score model that is neither a folder nor fetchable (offline, or no such repository)."""


def fetch(model: str) -> Path:
    """A local folder of `model`: the folder itself, or the hub snapshot (downloaded once, with a progress bar)."""
    if Path(model).expanduser().is_dir():
        return Path(model).expanduser()
    from huggingface_hub import snapshot_download
    from huggingface_hub.utils import enable_progress_bars

    enable_progress_bars()  # the run's quiet libraries hide transformers' bars, not this download's
    try:
        return Path(snapshot_download(model, allow_patterns=_PATTERNS))
    except Exception as err:  # noqa: BLE001 - offline / missing / gated: all the same to a user
        raise ModelMissing(f"the score model {model!r} is not downloaded and could not be fetched "
                           f"({type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}); scores are "
                           "off for this run: download it once online, or name a local folder in score_model / "
                           "likeness_model") from err


@dataclass
class Embedder:
    """One loaded score model: images (and, for CLIP/SigLIP, texts) to unit vectors."""

    name: str
    model: Any
    image_processor: Any
    tokenizer: Any | None  # None: an image-only model (DINOv2)
    device: torch.device

    @property
    def has_text(self) -> bool:
        return self.tokenizer is not None

    @torch.no_grad()
    def images(self, paths: Sequence[Path], batch: int = 16) -> torch.Tensor:
        from PIL import Image

        out = []
        for start in range(0, len(paths), batch):
            pictures = []
            for path in paths[start:start + batch]:
                with Image.open(path) as image:
                    pictures.append(image.convert("RGB"))
            pixels = self.image_processor(images=pictures, return_tensors="pt")["pixel_values"]
            pixels = pixels.to(self.device, dtype=self._dtype())
            if hasattr(self.model, "get_image_features"):
                features = _pooled(self.model.get_image_features(pixel_values=pixels))
            else:  # DINOv2: the class token after the final norm
                features = self.model(pixel_values=pixels).pooler_output
            out.append(features.float().cpu())
        return _unit(torch.cat(out)) if out else torch.zeros(0, 0)

    @torch.no_grad()
    def texts(self, texts: Sequence[str]) -> torch.Tensor:
        if self.tokenizer is None:
            raise ValueError(f"{self.name} has no text tower: it cannot score prompt fidelity")
        siglip = str(getattr(self.model.config, "model_type", "")).startswith("siglip")
        tokens = self.tokenizer(list(texts), padding="max_length" if siglip else True, truncation=True,
                                return_tensors="pt")
        kwargs = {"input_ids": tokens["input_ids"].to(self.device)}
        if "attention_mask" in tokens and not siglip:
            kwargs["attention_mask"] = tokens["attention_mask"].to(self.device)
        return _unit(_pooled(self.model.get_text_features(**kwargs)).float().cpu())

    def _dtype(self) -> torch.dtype:
        return next(self.model.parameters()).dtype


def load_embedder(model: str, device: torch.device | str = "cpu", with_text: bool = True) -> Embedder:
    """The model `model` in eval mode on `device` (fp16 on a GPU); ModelMissing when it cannot be had."""
    from transformers import AutoImageProcessor, AutoModel, AutoTokenizer

    folder = fetch(model)
    device = torch.device(device)
    dtype = torch.float16 if device.type == "cuda" else torch.float32
    try:
        net = AutoModel.from_pretrained(str(folder), dtype=dtype).to(device).eval()
        processor = AutoImageProcessor.from_pretrained(str(folder))
        tokenizer = AutoTokenizer.from_pretrained(str(folder)) if with_text and hasattr(net, "get_text_features") \
            else None
    except OSError as err:
        raise ModelMissing(f"the score model {model!r} could not be loaded from {folder}: {err}") from err
    if with_text and tokenizer is None:
        raise ModelMissing(f"score_model {model!r} has no text tower (a CLIP or SigLIP scores prompt fidelity; "
                           "DINOv2 can be likeness_model only)")
    return Embedder(model, net, processor, tokenizer, device)


def _pooled(output: Any) -> torch.Tensor:
    """transformers 5 returns the projected features as `pooler_output` of a model output; 4.x a tensor."""
    return output if isinstance(output, torch.Tensor) else output.pooler_output


def _unit(x: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.normalize(x.float(), dim=-1)


def fidelity(image_embeddings: torch.Tensor, text_embeddings: torch.Tensor) -> float:
    """The mean over the images of each image's cosine similarity with its own prompt (row i with row i)."""
    return float((image_embeddings * text_embeddings).sum(dim=-1).mean())


def likeness(sample_embeddings: torch.Tensor, training_mean: torch.Tensor) -> float:
    """The mean pairwise cosine similarity of every sample image with every training image: with unit vectors,
    each sample's dot product with the mean of the training embeddings, averaged (`training_mean` is that mean)."""
    return float((sample_embeddings @ training_mean).mean())
