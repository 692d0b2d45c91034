"""Textual inversion: a new word's vectors in the text encoders are all that trains (the UNet and every other word
stay as they are); saved as an embedding file that A1111, Forge, ComfyUI and diffusers load."""
from __future__ import annotations

from pathlib import Path

import torch

from trainers.core.options import TrainConfig
from trainers.methods.lora.file_format import save_lora_file
from trainers.methods.textual_inversion.embeddings import KeepOtherWords, NewWord, add_word
from trainers.methods.textual_inversion.rules import SUFFIX, token_strings
from trainers.models.single_file import SAVE_DTYPES
from trainers.train.diffusion import NoisePredictor
from trainers.train.metadata import modelspec_fields
from trainers.train.method import Method, Trainable, freeze
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
        for encoder in model.text_encoders:
            encoder.train()  # so gradient checkpointing behaves as in training
        predictor = NoisePredictor(model, None, cfg.clip_skip, train_text_encoder=True, memoize=False)
        groups = [{"params": word.parameters(), "lr": cfg.learning_rate, "name": "embeddings"}]
        return Trainable(model, predictor, groups, EmbeddingFile(cfg, word), hooks=[KeepOtherWords(word)])


METHOD = TextualInversion()
