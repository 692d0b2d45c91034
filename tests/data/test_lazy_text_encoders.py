"""A run whose captions and sample prompts are all in the disk text cache never reads its text encoders (issue 42):
they are deferred at loading (trainers/models/pending_encoders.py) and read only when a text is not cached."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

from trainers.models import pending_encoders


def _png_pixels(path: Path) -> bytes:
    from PIL import Image

    with Image.open(path) as image:
        return image.tobytes()


def _lora(path: Path) -> dict[str, torch.Tensor]:
    from trainers.methods.lora.file_format import read_lora_file

    return read_lora_file(path)[0]


@pytest.mark.slow
def test_a_run_with_every_text_cached_never_reads_its_text_encoder(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Tiny SD1: the first run encodes and caches its captions and sample prompt (the loader reads the text encoder
    once); a second one reads none, trains the same LoRA and renders the same sample; a third with a new sample
    prompt reads the encoder and renders that prompt too."""
    from helpers import train

    from trainers.demo import build_dataset
    from trainers.models import components
    from trainers.models.sd.tiny import build_tiny_sd1

    reads: list[str] = []
    real_load = components.load_component

    def counted(cls, folder, subfolder, *args):  # type: ignore[no-untyped-def]
        if subfolder.startswith("text_encoder"):
            reads.append(subfolder)
        return real_load(cls, folder, subfolder, *args)

    monkeypatch.setattr(components, "load_component", counted)
    model = build_tiny_sd1(tmp_path / "model")
    data = build_dataset(tmp_path / "data")
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("a photo of sks shape --w 64 --h 64 --s 2 --d 1\n", encoding="utf-8")
    common = {"pretrained_model_name_or_path": str(model), "train_data_dir": str(data), "resolution": "64",
              "max_train_steps": 2, "max_data_loader_n_workers": 0, "network_train_unet_only": True,
              "cache_latents": True, "cache_text_encoder_outputs": True, "cache_text_encoder_outputs_to_disk": True,
              "sample_prompts": str(prompts), "sample_every_n_steps": 2, "save_precision": "float"}

    assert train("lora", tmp_path / "first", **common, output_dir=str(tmp_path / "first")) == 0
    assert reads == ["text_encoder"]

    reads.clear()
    assert train("lora", tmp_path / "second", **common, output_dir=str(tmp_path / "second")) == 0
    assert reads == []
    first, second = _lora(tmp_path / "first" / "lora.safetensors"), _lora(tmp_path / "second" / "lora.safetensors")
    assert first.keys() == second.keys() and all(torch.equal(first[k], second[k]) for k in first)
    samples = [sorted((tmp_path / run).rglob("*.png")) for run in ("first", "second")]
    assert len(samples[0]) == len(samples[1]) == 1
    assert _png_pixels(samples[0][0]) == _png_pixels(samples[1][0])

    prompts.write_text("a photo of sks shape --w 64 --h 64 --s 2 --d 1\na red sks shape --w 64 --h 64 --s 2\n",
                       encoding="utf-8")
    assert train("lora", tmp_path / "third", **common, output_dir=str(tmp_path / "third")) == 0
    assert reads == ["text_encoder"]  # the new prompt was not cached
    assert len(list((tmp_path / "third").rglob("*.png"))) == 2


def _tiny_clip(folder: Path) -> Path:
    from transformers import CLIPTextConfig, CLIPTextModel

    torch.manual_seed(0)
    CLIPTextModel(CLIPTextConfig(vocab_size=99, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                                 num_attention_heads=2, max_position_embeddings=16)).save_pretrained(
        folder / "text_encoder")
    return folder


def test_a_deferred_encoder_is_handed_around_unread_and_read_by_a_call(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """Its config, dtype, device, eval mode, frozen flag and modules (what a sample pipeline and a freeze touch) read
    nothing; a call reads it once, frozen as it was told, with its hooks run, and gives the encoder's output;
    read_pending puts the encoder itself in the list."""
    from transformers import CLIPTextModel

    folder = _tiny_clip(tmp_path)
    reads: list[str] = []
    real_reader = pending_encoders._Reader.__call__
    monkeypatch.setattr(pending_encoders._Reader, "__call__",
                        lambda self: (reads.append(self.subfolder), real_reader(self))[1])
    with pending_encoders.deferring_text_encoders():
        stand_in = pending_encoders.load_text_encoder(CLIPTextModel, folder, "text_encoder", torch.bfloat16, False)
    hooked: list[nn.Module] = []
    stand_in.when_read(hooked.append)
    stand_in.requires_grad_(False).eval()
    assert (stand_in.config.hidden_size, stand_in.dtype, stand_in.device) == (16, torch.bfloat16, torch.device("cpu"))
    assert list(stand_in.modules()) == [stand_in] and not hasattr(stand_in, "_hf_hook")
    assert pending_encoders.is_pending(stand_in) and reads == []

    ids = torch.tensor([[1, 5, 7, 2]])
    expected = CLIPTextModel.from_pretrained(folder / "text_encoder", dtype=torch.bfloat16)(ids).last_hidden_state
    assert torch.equal(stand_in(ids).last_hidden_state, expected) and reads == ["text_encoder"]
    real = hooked[0]
    assert isinstance(real, CLIPTextModel) and not real.training
    assert not any(p.requires_grad for p in real.parameters())
    encoders: list[nn.Module] = [stand_in]
    pending_encoders.read_pending(encoders)
    assert encoders == [real] and reads == ["text_encoder"] and not pending_encoders.is_pending(stand_in)


def test_without_deferring_the_encoder_is_read_at_loading(tmp_path: Path) -> None:
    from transformers import CLIPTextModel

    folder = _tiny_clip(tmp_path)
    encoder = pending_encoders.load_text_encoder(CLIPTextModel, folder, "text_encoder", torch.float32, False)
    assert isinstance(encoder, CLIPTextModel)
