"""Frozen text encoders are not run again for captions they already encoded (trainers/train/text_memo.py)."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from trainers.demo import build_dataset
from trainers.methods.lora.file_format import read_lora_file
from trainers.train import text_memo
from trainers.train.diffusion import NoisePredictor
from trainers.train.text_memo import TextMemo

from helpers import train


class CountingEncoder:
    def __init__(self) -> None:
        self.batches = 0

    def __call__(self, ids: list[torch.Tensor], weights: list[torch.Tensor] | None
                 ) -> tuple[torch.Tensor, torch.Tensor]:
        self.batches += 1
        hidden = ids[0].float().unsqueeze(-1).repeat(1, 1, 3) * (1.0 if weights is None else weights[0].unsqueeze(-1))
        return hidden, hidden.sum(1)


def _ids(*rows: list[int]) -> list[torch.Tensor]:
    return [torch.tensor(rows)]


def test_a_batch_of_known_captions_is_put_together_without_encoding() -> None:
    encode, memo = CountingEncoder(), TextMemo()
    first = memo(encode, _ids([1, 2], [3, 4]), None)
    again = memo(encode, _ids([3, 4], [1, 2]), None)  # the same captions in another order
    assert encode.batches == 1
    assert torch.equal(again[0], first[0].flip(0)) and torch.equal(again[1], first[1].flip(0))
    memo(encode, _ids([3, 4], [5, 6]), None)  # one new caption: the whole batch is encoded
    assert encode.batches == 2
    weighted = memo(encode, _ids([1, 2]), [torch.tensor([[2.0, 1.0]])])  # other token weights: other outputs
    assert encode.batches == 3 and weighted[0][0, 0, 0] == 2.0


def test_nothing_is_kept_beyond_the_budget() -> None:
    encode, memo = CountingEncoder(), TextMemo(limit=0)
    for _ in range(3):
        memo(encode, _ids([1, 2]), None)
    assert encode.batches == 3 and memo.kept == 0


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_dataset(tmp_path_factory.mktemp("memo data"), folder="1_sks shape", size=64)


def test_a_lora_run_encodes_each_caption_once_and_trains_the_same(tiny_sd1_dir: Path, dataset: Path,
                                                                  tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    encoded: list[int] = []
    original = NoisePredictor._encode

    def counting(self: NoisePredictor, ids: list[torch.Tensor], weights: list[torch.Tensor] | None):
        encoded.append(ids[0].shape[0])
        return original(self, ids, weights)

    monkeypatch.setattr(NoisePredictor, "_encode", counting)
    values = dict(pretrained_model_name_or_path=str(tiny_sd1_dir), train_data_dir=str(dataset), resolution="64",
                  max_data_loader_n_workers=0, network_dim=4, network_alpha=2, learning_rate=1e-3,
                  save_precision="float", train_batch_size=2, max_train_epochs=3, network_train_unet_only=True)
    assert train("lora", tmp_path / "memo", **values, output_dir=str(tmp_path / "memo-out")) == 0
    assert sum(encoded) == 8, encoded  # the 8 captions in the first epoch; epochs 2 and 3 encode nothing
    encoded.clear()
    monkeypatch.setattr(text_memo, "MEMO_BYTES", 0)
    assert train("lora", tmp_path / "plain", **values, output_dir=str(tmp_path / "plain-out")) == 0
    assert sum(encoded) == 24
    a, _ = read_lora_file(tmp_path / "memo-out" / "lora.safetensors")
    b, _ = read_lora_file(tmp_path / "plain-out" / "lora.safetensors")
    assert a.keys() == b.keys() and max((a[k] - b[k]).abs().max().item() for k in a) < 1e-5


def test_only_encoders_without_dropout_are_memoised() -> None:
    from transformers import CLIPTextConfig, CLIPTextModel, T5Config, T5EncoderModel

    clip = CLIPTextModel(CLIPTextConfig(vocab_size=99, hidden_size=8, intermediate_size=16, num_hidden_layers=1,
                                        num_attention_heads=2))
    t5 = T5EncoderModel(T5Config(vocab_size=99, d_model=8, d_ff=16, num_layers=1, num_heads=2, d_kv=4))
    assert text_memo.deterministic(clip) and not text_memo.deterministic(t5)  # T5's dropout_rate is 0.1
