"""The pass that encodes the captions once before the first step (cache_text_encoder_outputs) holds the text encoders
alone on the training device: the denoiser (quantized or not) goes there only after the encodings are done and the
text encoders left (issue 42 item 2). A second run whose captions are cached on disk does not put the text encoders
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

    def moved(self, module: nn.Module, args: tuple, kwargs: dict) -> None:
        device = kwargs.get("device", args[0] if args else None)
        if not self.recording or isinstance(device, torch.dtype) or device is None:
            return
        for sub in module.modules():
            self.on_device.add(id(sub))

    def snapshot(self, model: object) -> None:
        def placed(module: nn.Module) -> bool:
            return any(id(sub) in self.on_device for sub in module.modules())

        self.at_encode.append({"denoiser": placed(model.unet),  # type: ignore[attr-defined]
                               "text encoders": all(map(placed, model.text_encoders))})  # type: ignore[attr-defined]


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
        model = current["model"]

        def recorded(caps: list[str]):  # type: ignore[no-untyped-def]
            seen.snapshot(model)
            return encode(caps)

        return real_build(captions, recorded, *args, **kwargs)

    current: dict[str, object] = {}
    real_pipeline = session.build_pipeline

    def build_pipeline(cfg, catalog, model, *args, **kwargs):  # type: ignore[no-untyped-def]
        current["model"] = model
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
    assert placements.at_encode and all(seen == {"denoiser": False, "text encoders": True}
                                        for seen in placements.at_encode), placements.at_encode
    assert train("lora", tmp_path / "steps", **common, output_dir=str(tmp_path / "steps")) == 0
    cached, steps = _lora(tmp_path / "cached" / "lora.safetensors"), _lora(tmp_path / "steps" / "lora.safetensors")
    assert cached.keys() == steps.keys()
    assert all(torch.allclose(cached[k], steps[k], atol=1e-6) for k in cached)
