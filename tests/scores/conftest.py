"""Tiny random score models (CLIP, DINOv2) saved as folders, built offline from transformers' config classes."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch


@pytest.fixture(scope="session")
def tiny_clip_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from transformers import CLIPConfig, CLIPImageProcessor, CLIPModel, CLIPTokenizer

    from trainers.models.tiny import write_tiny_tokenizer

    folder = tmp_path_factory.mktemp("tiny clip")
    write_tiny_tokenizer(folder)
    vocab = len(CLIPTokenizer.from_pretrained(str(folder)))
    torch.manual_seed(0)
    config = CLIPConfig(text_config={"vocab_size": vocab, "hidden_size": 32, "intermediate_size": 64,
                                     "num_attention_heads": 2, "num_hidden_layers": 2, "max_position_embeddings": 77},
                        vision_config={"hidden_size": 32, "intermediate_size": 64, "num_attention_heads": 2,
                                       "num_hidden_layers": 2, "image_size": 32, "patch_size": 8},
                        projection_dim=16)
    CLIPModel(config).save_pretrained(str(folder))
    CLIPImageProcessor(size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32}).save_pretrained(str(folder))
    return folder


@pytest.fixture(scope="session")
def tiny_dino_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from transformers import BitImageProcessor, Dinov2Config, Dinov2Model

    folder = tmp_path_factory.mktemp("tiny dinov2")
    torch.manual_seed(1)
    Dinov2Model(Dinov2Config(hidden_size=32, intermediate_size=64, num_attention_heads=2, num_hidden_layers=2,
                             image_size=32, patch_size=8)).save_pretrained(str(folder))
    BitImageProcessor(size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32}).save_pretrained(str(folder))
    return folder
