"""Textual inversion: a new word's vectors in the text encoders are all that trains (the UNet and every other word
stay as they are); saved as an embedding file that A1111, Forge, ComfyUI and diffusers load."""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn

from trainers.core.options import TrainConfig
from trainers.methods.lora.file_format import save_lora_file
from trainers.methods.textual_inversion.embeddings import KeepOtherWords, NewWord, add_word, read_embedding_file
from trainers.methods.textual_inversion.rules import SUFFIX, token_strings
from trainers.methods.textual_inversion.templates import templates_for
from trainers.models import LoadedModel
from trainers.models.single_file import SAVE_DTYPES
from trainers.train.diffusion import NoisePredictor, NoiseOptions, diffusion_loss
from trainers.train.metadata import modelspec_fields
from trainers.train.method import Method, Trainable, freeze
from trainers.train.noise import per_sample
from trainers.train.session import Session


class EmbeddingFile:
    """The output: one .safetensors embedding (sd-scripts' keys), with the word and its vector count as metadata."""

    suffix = SUFFIX

    def __init__(self, cfg: TrainConfig, word: NewWord) -> None:
        self.word, self.dtype = word, SAVE_DTYPES[cfg.save_precision]
        self.metadata = {"ss_token_string": word.word, "ss_num_vectors_per_token": str(len(word.tokens)),
                         "ss_init_word": cfg.init_word, "ss_output_name": cfg.output_name,
                         **{f"modelspec.{k}": v for k, v in modelspec_fields(cfg).items()}}

    def save(self, path: Path, epoch: int, step: int) -> None:
        save_lora_file(path, self.word.embedding_file(self.dtype),
                       {**self.metadata, "ss_epoch": str(epoch), "ss_steps": str(step)})

    def nbytes(self) -> int:
        return sum(v.numel() for v in self.word.vectors()) * torch.empty((), dtype=self.dtype).element_size()


class TextualInversion(Method):
    def make_trainable(self, cfg: TrainConfig, session: Session) -> Trainable:
        model = session.model
        freeze(model.unet, model.vae, *model.text_encoders)
        word = add_word(model, cfg.token_string.strip(), token_strings(cfg), cfg.init_word)
        if cfg.weights.strip():
            word.start_from(read_embedding_file(Path(cfg.weights.strip()).expanduser(), len(model.text_encoders)))
        for encoder in model.text_encoders:
            encoder.train()  # so gradient checkpointing behaves as in training
        predictor = NoisePredictor(model, None, cfg.clip_skip, train_text_encoder=True, memoize=False)
        groups = [{"params": word.parameters(), "lr": cfg.learning_rate, "name": "embeddings"}]
        templates = templates_for(cfg.use_object_template, cfg.use_style_template)
        return Trainable(model, predictor, groups, EmbeddingFile(cfg, word), hooks=[KeepOtherWords(word)],
                         objective=on_templates(templates, word.word, cfg.seed) if templates else diffusion_loss)


def on_templates(templates: tuple[str, ...], word: str, seed: int) -> Callable[..., torch.Tensor]:
    """The loss with each sample's caption replaced by one of `templates` holding the word, drawn from the sample's
    own random numbers (as sd-scripts' use_object_template and use_style_template, which draw at random)."""
    def objective(predictor: nn.Module, model: LoadedModel, batch: dict[str, Any], opts: NoiseOptions,
                  weight_dtype: torch.dtype) -> torch.Tensor:
        drawn = per_sample(batch["keys"], seed, "template", lambda g: torch.randint(len(templates), (), generator=g))
        captions = [templates[int(i)].format(word) for i in drawn]
        return diffusion_loss(predictor, model, {**batch, "input_ids": model.tokenize(captions)}, opts, weight_dtype)

    return objective


METHOD = TextualInversion()
