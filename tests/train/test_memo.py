"""Frozen text encoders and the VAE are not run again for captions and images they already encoded
(trainers/train/memo.py)."""
from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from helpers import train

from trainers.demo import build_dataset
from trainers.methods.lora.file_format import read_lora_file
from trainers.train import memo as memos
from trainers.train.diffusion import NoisePredictor
from trainers.train.latents import latent_distribution
from trainers.train.memo import RowMemo, rows_of, text_keys


class CountingEncoder:
    """A text encoder whose every row depends on the batch it is in (as a real one's float rounding does)."""

    def __init__(self) -> None:
        self.rows = 0

    def __call__(self, ids: list[torch.Tensor], weights: list[torch.Tensor] | None
                 ) -> tuple[torch.Tensor, torch.Tensor]:
        self.rows += ids[0].shape[0]
        hidden = ids[0].float().unsqueeze(-1).repeat(1, 1, 3) * (1.0 if weights is None else weights[0].unsqueeze(-1))
        hidden = hidden + ids[0].float().sum() * 1e-6  # another batch, other low bits
        return hidden, hidden.sum(1)


def _ids(*rows: list[int]) -> list[torch.Tensor]:
    return [torch.tensor(rows)]


def _text(memo: RowMemo, encode: CountingEncoder, ids: list[torch.Tensor],
          weights: list[torch.Tensor] | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
    return memo(lambda rows: encode(rows_of(ids, rows), rows_of(weights, rows)), text_keys(ids, weights))


def test_known_captions_are_not_encoded_again() -> None:
    encode, memo = CountingEncoder(), RowMemo(memos.TEXT_BYTES)
    first = _text(memo, encode, _ids([1, 2], [3, 4]))
    again = _text(memo, encode, _ids([3, 4], [1, 2]))  # the same captions in another order
    assert encode.rows == 2
    assert torch.equal(again[0], first[0].flip(0)) and torch.equal(again[1], first[1].flip(0))
    _text(memo, encode, _ids([3, 4], [5, 6]))  # one new caption: only it is encoded
    assert encode.rows == 3
    weighted = _text(memo, encode, _ids([1, 2]), [torch.tensor([[2.0, 1.0]])])  # other token weights: other outputs
    assert encode.rows == 4 and weighted[0][0, 0, 0].item() == pytest.approx(2.0, abs=1e-4)


def test_a_row_is_the_same_whatever_the_memo_saw_before() -> None:
    """A resumed run starts with an empty memo: the rows it computes must be the ones the uninterrupted run kept."""
    seen, fresh, full = RowMemo(memos.TEXT_BYTES), RowMemo(memos.TEXT_BYTES), RowMemo(limit=0)
    _text(seen, CountingEncoder(), _ids([1, 2], [7, 8]))  # [1, 2] and [5, 6] first came in other batches
    _text(seen, CountingEncoder(), _ids([5, 6], [9, 9]))
    batch = _ids([5, 6], [1, 2])
    kept = _text(seen, CountingEncoder(), batch)
    for other in (fresh, full):
        computed = _text(other, CountingEncoder(), batch)
        assert torch.equal(kept[0], computed[0]) and torch.equal(kept[1], computed[1])


def test_the_vae_gives_the_same_rows_kept_or_computed(tiny_sd1_dir: Path) -> None:
    from diffusers import AutoencoderKL

    vae = AutoencoderKL.from_pretrained(tiny_sd1_dir / "vae")
    pixels = torch.randn(4, 3, 64, 64, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():  # rounding that depends on the batch: the reason rows are encoded alone
        assert not torch.equal(vae.encode(pixels).latent_dist.mean[:1], vae.encode(pixels[:1]).latent_dist.mean)

    def distribution(memo: RowMemo, rows: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
        model = SimpleNamespace(vae=vae, latent_memo=memo)
        return latent_distribution(model, {"pixels": pixels[rows], "pixel_keys": [f"image {i}" for i in rows]})

    seen = RowMemo(memos.LATENT_BYTES)
    distribution(seen, [0, 1, 2])
    distribution(seen, [3])
    kept, computed = distribution(seen, [3, 0]), distribution(RowMemo(memos.LATENT_BYTES), [3, 0])
    assert list(seen.rows) == ["image 0", "image 1", "image 2", "image 3"]
    assert torch.equal(kept[0], computed[0]) and torch.equal(kept[1], computed[1])


def test_nothing_is_kept_beyond_the_budget_and_rows_without_a_key_never() -> None:
    encode, memo = CountingEncoder(), RowMemo(limit=0)
    for _ in range(3):
        _text(memo, encode, _ids([1, 2]))
    assert encode.rows == 3 and memo.kept == 0
    memo = RowMemo(memos.LATENT_BYTES)
    for _ in range(2):
        memo(lambda rows: encode(rows_of(_ids([1, 2], [3, 4]), rows), None), ["a", None])  # a random crop: no key
    assert encode.rows == 6 and list(memo.rows) == ["a"]


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_dataset(tmp_path_factory.mktemp("memo data"), folder="1_sks shape", size=64)


def test_a_lora_run_encodes_each_caption_and_image_once_and_trains_the_same(fake_model_dir: Path, dataset: Path,
                                                                           tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.fake_family.family import FakeVae

    captions: list[int] = []
    images: list[int] = []
    encode_text, encode_image = NoisePredictor._encode, FakeVae.encode

    def counting_text(self: NoisePredictor, ids: list[torch.Tensor], weights: list[torch.Tensor] | None):
        captions.append(ids[0].shape[0])
        return encode_text(self, ids, weights)

    def counting_images(self: FakeVae, pixels: torch.Tensor, *args, **kwargs):
        images.append(pixels.shape[0])
        return encode_image(self, pixels, *args, **kwargs)

    monkeypatch.setattr(NoisePredictor, "_encode", counting_text)
    monkeypatch.setattr(FakeVae, "encode", counting_images)
    values = dict(pretrained_model_name_or_path=str(fake_model_dir), train_data_dir=str(dataset), resolution="64",
                  max_data_loader_n_workers=0, network_dim=4, network_alpha=2, learning_rate=1e-3,
                  save_precision="float", train_batch_size=2, max_train_epochs=3, network_train_unet_only=True)
    assert train("lora", tmp_path / "memo", **values, output_dir=str(tmp_path / "memo-out")) == 0
    # the 8 captions and images in the first epoch, each on its own; epochs 2 and 3 encode nothing
    assert captions == [1] * 8 and images == [1] * 8, (captions, images)
    captions.clear()
    images.clear()
    assert train("lora", tmp_path / "plain", **values, memoize_encoders=False,
                 output_dir=str(tmp_path / "plain-out")) == 0
    assert captions == [2] * 12 and images == [2] * 12  # every batch of every epoch, whole
    a, _ = read_lora_file(tmp_path / "memo-out" / "lora.safetensors")
    b, _ = read_lora_file(tmp_path / "plain-out" / "lora.safetensors")
    # the same training up to the float rounding of a batch encoded whole against each of its images alone
    assert a.keys() == b.keys() and max((a[k] - b[k]).abs().max().item() for k in a) < 1e-4


def test_only_images_whose_pixels_repeat_have_a_key(dataset: Path) -> None:
    from trainers.core.options import load_config
    from trainers.data.catalog import build_catalog
    from trainers.data.dataset import CaptionedImages

    def keys(**settings: object) -> list[object]:
        cfg = load_config("lora", overrides=[f"train_data_dir='{dataset.as_posix()}'", "resolution='64'",
                                             *(f"{k}={str(v).lower()}" for k, v in settings.items())])
        images = CaptionedImages(build_catalog(cfg.values, []), lambda caps: [torch.zeros(len(caps), 4)], seed=1)
        return [images[(epoch, 0, False)]["pixel_key"] for epoch in range(8)]

    assert len(set(keys())) == 1
    assert len(set(keys(flip_aug=True))) == 2  # flipped and not: two pictures of one image
    assert set(keys(random_crop=True)) == {None} and set(keys(color_aug=True)) == {None}


def test_captions_that_change_every_epoch_get_no_text_memo(dataset: Path) -> None:
    from trainers.core.options import load_config
    from trainers.data.catalog import build_catalog
    from trainers.train.session import Session

    def memoized(**settings: object) -> bool:
        cfg = load_config("lora", overrides=[f"train_data_dir='{dataset.as_posix()}'", "resolution='64'",
                                             *(f"{k}={str(v).lower()}" for k, v in settings.items())])
        return Session.memoize_text.fget(SimpleNamespace(cfg=cfg, catalog=build_catalog(cfg.values, [])))

    assert memoized() and memoized(flip_aug=True)
    assert not memoized(shuffle_caption=True) and not memoized(caption_tag_dropout_rate=0.1)
    assert not memoized(memoize_encoders=False)


def test_only_encoders_without_dropout_are_memoised() -> None:
    from transformers import CLIPTextConfig, CLIPTextModel, T5Config, T5EncoderModel

    clip = CLIPTextModel(CLIPTextConfig(vocab_size=99, hidden_size=8, intermediate_size=16, num_hidden_layers=1,
                                        num_attention_heads=2))
    t5 = T5EncoderModel(T5Config(vocab_size=99, d_model=8, d_ff=16, num_layers=1, num_heads=2, d_kv=4))
    assert memos.deterministic(clip) and not memos.deterministic(t5)  # T5's dropout_rate is 0.1
