"""The pass that encodes the captions once before the first step (cache_text_encoder_outputs) holds the text encoders
alone on the training device: the denoiser (quantized or not) goes there only after the encodings are done and the
text encoders left, and the VAE waits in host RAM meanwhile (issue 42 item 2). A second run whose captions are cached on disk does not put the text encoders
on the device at all."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

from trainers.data import cache as cache_module


class _Placements:
    """Which modules were sent to the training device (`.to(device)` after the model loaded: on a CPU the device is
    the CPU, so a module counts as "on the device" once it was moved there), and what was there at each encoding."""

    def __init__(self) -> None:
        self.on_device: set[int] = set()
        self.recording = False
        self.at_encode: list[dict[str, bool]] = []
        self.model: object = None  # the run's model as the pipeline got it

    def placed(self, module: nn.Module) -> bool:
        return any(id(sub) in self.on_device for sub in module.modules())

    def moved(self, module: nn.Module, args: tuple, kwargs: dict) -> None:
        device = kwargs.get("device", args[0] if args else None)
        if not self.recording or isinstance(device, torch.dtype) or device is None:
            return  # a dtype cast
        for sub in module.modules():  # "cpu": back to the host (te.to("cpu")); the run's device is a torch.device
            (self.on_device.discard if device == "cpu" else self.on_device.add)(id(sub))

    def snapshot(self, model: object) -> None:
        self.at_encode.append({"denoiser": self.placed(model.unet),  # type: ignore[attr-defined]
                               "text encoders": all(map(self.placed, model.text_encoders)),  # type: ignore[attr-defined]
                               "VAE": self.placed(model.vae)})  # type: ignore[attr-defined]

    def clear(self) -> None:
        self.on_device.clear()
        self.at_encode.clear()
        self.recording = False


@pytest.fixture()
def placements(monkeypatch: pytest.MonkeyPatch) -> _Placements:
    """Records `.to()` calls from the moment the model has loaded, and what was on the device at each encoding."""
    from trainers.data import pipeline
    from trainers.train import session

    seen = _Placements()
    real_to = nn.Module.to

    def to(module: nn.Module, *args: object, **kwargs: object) -> nn.Module:
        seen.moved(module, args, kwargs)
        return real_to(module, *args, **kwargs)

    real_load = session.load_model

    def load(*args: object, **kwargs: object) -> object:
        model = real_load(*args, **kwargs)
        seen.recording = True
        return model

    real_build = pipeline.build_text_cache

    def build(captions, encode, *args, **kwargs):  # type: ignore[no-untyped-def]
        def recorded(caps: list[str]):  # type: ignore[no-untyped-def]
            seen.snapshot(seen.model)
            return encode(caps)

        return real_build(captions, recorded, *args, **kwargs)

    real_pipeline = session.build_pipeline

    def build_pipeline(cfg, catalog, model, *args, **kwargs):  # type: ignore[no-untyped-def]
        seen.model = model
        return real_pipeline(cfg, catalog, model, *args, **kwargs)

    monkeypatch.setattr(nn.Module, "to", to)
    monkeypatch.setattr(session, "load_model", load)
    monkeypatch.setattr(session, "build_pipeline", build_pipeline)
    monkeypatch.setattr(pipeline, "build_text_cache", build)
    return seen


def _lora(path: Path) -> dict[str, torch.Tensor]:
    from trainers.methods.lora.file_format import read_lora_file

    return read_lora_file(path)[0]


@pytest.mark.parametrize("base", ["none", "int8"])
def test_the_text_encoders_encode_alone_on_the_device(fake_model_dir: Path, tmp_path: Path, base: str,
                                                      placements: _Placements) -> None:
    """With cached text-encoder outputs, while the captions are encoded the denoiser (quantized or not) has not been
    sent to the device, the text encoders have; the LoRA trained is the one trained without cached outputs (the text
    encoders then run in every step), so the order changes no result."""
    from helpers import train

    from trainers.demo import build_dataset

    data = build_dataset(tmp_path / "data")
    common = {"pretrained_model_name_or_path": str(fake_model_dir), "train_data_dir": str(data), "resolution": "64",
              "max_train_steps": 2, "max_data_loader_n_workers": 0, "network_train_unet_only": True,
              "cache_latents": True, "base_model_precision": base, "save_precision": "float"}
    assert train("lora", tmp_path / "cached", **common, cache_text_encoder_outputs=True,
                 output_dir=str(tmp_path / "cached")) == 0
    assert placements.at_encode and all(seen == {"denoiser": False, "text encoders": True, "VAE": False}
                                        for seen in placements.at_encode), placements.at_encode
    assert placements.placed(placements.model.vae)  # type: ignore[attr-defined] # back for the steps and samples
    assert train("lora", tmp_path / "steps", **common, output_dir=str(tmp_path / "steps")) == 0
    cached, steps = _lora(tmp_path / "cached" / "lora.safetensors"), _lora(tmp_path / "steps" / "lora.safetensors")
    assert cached.keys() == steps.keys()
    assert all(torch.allclose(cached[k], steps[k], atol=1e-6) for k in cached)


def test_a_second_run_with_the_captions_on_disk_leaves_the_text_encoders_off_the_device(
        fake_model_dir: Path, tmp_path: Path, placements: _Placements, monkeypatch: pytest.MonkeyPatch) -> None:
    """cache_text_encoder_outputs_to_disk: the second run reads every caption's outputs, encodes none, and never puts
    the text encoders on the device; they are quantized (text_encoder_precision) in host RAM all the same, so what
    they encode later encodes as the cached captions were."""
    from helpers import train

    from trainers.demo import build_dataset
    from trainers.train import session

    placed: list[str] = []
    real_place = session._TextEncoders.place
    monkeypatch.setattr(session._TextEncoders, "place", lambda self: (placed.append("placed"), real_place(self))[1])
    data = build_dataset(tmp_path / "data")
    common = {"pretrained_model_name_or_path": str(fake_model_dir), "train_data_dir": str(data), "resolution": "64",
              "max_train_steps": 1, "max_data_loader_n_workers": 0, "network_train_unet_only": True,
              "cache_latents": True, "cache_text_encoder_outputs": True, "cache_text_encoder_outputs_to_disk": True,
              "text_encoder_precision": "int8"}
    assert train("lora", tmp_path / "first", **common, output_dir=str(tmp_path / "first")) == 0
    assert placements.at_encode and all(seen["text encoders"] for seen in placements.at_encode)
    assert placed == ["placed"]
    placements.clear()
    assert train("lora", tmp_path / "second", **common, output_dir=str(tmp_path / "second")) == 0
    assert placements.at_encode == [] and placed == ["placed"]  # the second run encoded nothing, placed nothing
    encoders = placements.model.text_encoders  # type: ignore[attr-defined]
    linears = [layer for encoder in encoders for layer in encoder.modules() if isinstance(layer, nn.Linear)]
    assert linears and all(type(layer.weight).__name__ == "Int8Tensor" for layer in linears)  # torchao's int8


def test_the_text_cache_places_the_encoders_and_asks_the_batch_only_when_it_encodes(tmp_path: Path) -> None:
    calls: list[str] = []
    batches: list[int] = []

    def encode(captions: list[str]) -> tuple[torch.Tensor, None]:
        batches.append(len(captions))
        return torch.zeros(len(captions), 2, 3), None

    def batch() -> int:
        calls.append("batch")
        return 3

    captions = [f"caption {i}" for i in range(7)]
    cache_module.build_text_cache(captions, encode, batch, folder=tmp_path, encoder_key="k",
                                  prepare=lambda: calls.append("place"))
    assert calls == ["place", "batch"] and batches == [3, 3, 1]
    calls.clear()
    cache_module.build_text_cache(captions, encode, batch, folder=tmp_path, encoder_key="k",
                                  prepare=lambda: calls.append("place"))
    assert calls == [] and batches == [3, 3, 1]  # all read from the folder: nothing placed, nothing encoded


def test_the_caption_batch_follows_the_free_memory_on_a_gpu_and_is_16_on_a_cpu(monkeypatch: pytest.MonkeyPatch
                                                                                ) -> None:
    """text_encoder_batch_size unset: as many captions as 80% of the free memory holds by the estimate of one's
    activations (Qwen2.5-VL's 8.3 B parameters at 256 tokens: ~0.105 GB in bf16), 1 to 64; on a CPU 16."""
    from types import SimpleNamespace

    from trainers.memory_estimate import caption_activations_gb, caption_batch_size
    from trainers.train import session

    per_caption = caption_activations_gb(8_292_166_656, 256)
    assert per_caption == pytest.approx(0.105, abs=0.001)
    assert caption_batch_size(2.0, per_caption) == 15 and caption_batch_size(0.01, per_caption) == 1
    assert caption_batch_size(100.0, per_caption) == 64
    encoder = nn.Linear(50_000, 50_000, bias=False, device="meta")  # 2.5 B parameters, no memory
    model = SimpleNamespace(text_encoders=[encoder], family=SimpleNamespace(name="qwen_image"))
    assert session._caption_batch(model, torch.device("cpu"), torch.bfloat16) == 16  # type: ignore[arg-type]
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device: (int(0.5e9), int(80e9)))
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda device: int(0.3e9))
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda device: int(0.2e9))
    per_caption = caption_activations_gb(2_500_000_000, 256)
    expected = caption_batch_size(0.6, per_caption)  # free 0.5 GB and the allocator's unused 0.1
    assert 1 < expected < 64 and session._caption_batch(model, torch.device("cuda"), torch.bfloat16) == expected
