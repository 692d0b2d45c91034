"""LoRA objectives with the base model's own predictions as targets: a slider (LECO / ai-toolkit concept sliders)
and preservation without class images (ai-toolkit's differential output preservation), on the tests' fake model
family (tests/fake_family/): what an objective does to the predictions does not depend on the model."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from trainers.core.options import load_config
from trainers.demo import build_dataset
from trainers.preflight.validate import validate

from helpers import FAST, train

CAPTION = "sks shape, grey square"  # the demo images' captions: "sks shape, <colour> <shape>"


def issues_of(**values: object) -> dict[str, str]:
    cfg = load_config("lora", overrides=[f"{k}={v!r}".replace("'", '"') for k, v in values.items()])
    return {i.field: i.message for i in validate(cfg, check_paths=False)}


def test_a_slider_without_both_prompts_or_preservation_without_its_trigger_is_named_before_training() -> None:
    assert "is needed with slider_positive" in issues_of(slider_positive="smiling")["slider_negative"]
    assert "is needed with slider_negative" in issues_of(slider_negative="frowning")["slider_positive"]
    assert "is needed with preservation_weight" in issues_of(preservation_weight=1.0)["preservation_trigger"]
    assert "network_module" in issues_of(slider_positive="a", slider_negative="b", network_module="lycoris.kohya")
    both = issues_of(slider_positive="smiling", slider_negative="frowning", preservation_weight=1.0,
                     preservation_trigger="sks")
    assert not {"slider_positive", "slider_negative", "preservation_trigger"} & set(both)


def _train(model: Path, dataset: Path, out: Path, run_dir: Path, **values: object) -> Path:
    """A LoRA trained in this process, set as `--set`s in this order would set it."""
    assert train("lora", run_dir, *FAST, "train_batch_size=1", pretrained_model_name_or_path=str(model),
                 train_data_dir=str(dataset), output_dir=str(out), network_train_unet_only=True, max_train_steps=2,
                 seed=1, **values) == 0
    return out / "lora.safetensors"


class Unet:
    """The base model's denoiser at one fixed noisy latent, with or without a LoRA (our LoRA network, the file's
    weights loaded, applied at a multiplier)."""

    def __init__(self, model: Path, lora: Path | None = None, weight: float = 0.0) -> None:
        from trainers.methods.lora.file_format import read_lora_file
        from trainers.methods.lora.network import LoRANetwork
        from trainers.models import load_model

        self.path = model
        self.model = loaded = load_model(str(model), "auto", torch.float32)
        if lora is not None:
            state, _ = read_lora_file(lora)
            network = LoRANetwork(loaded.unet, loaded.text_encoders, unet_key_style=loaded.family.unet_key_style,
                                  network_dim=1, network_alpha=1.0,
                                  modules_dim=LoRANetwork.modules_dim_from_state_dict(state),
                                  unet_targets=loaded.family.lora_targets(loaded.unet), train_text_encoder=False)
            network.load_kohya_state_dict(state)
            network.apply_to()
            network.set_multiplier(weight)
            self.network = network  # its hooks hold the LoRA modules
        generator = torch.Generator().manual_seed(0)
        self.latent = torch.randn((1, 4, 8, 8), generator=generator)

    def predict(self, prompt: str) -> torch.Tensor:
        family = self.model.family
        with torch.no_grad():
            hidden, pooled = family.encode_prompts(self.model.text_encoders, self.model.tokenize([prompt]), 1)
            return family.denoise(self.model.unet, self.latent, torch.tensor([500]), hidden, pooled, None)

    def with_lora(self, lora: Path, weight: float) -> "Unet":
        return Unet(self.path, lora, weight)


def _cosine(a: torch.Tensor, b: torch.Tensor) -> float:
    return float(torch.nn.functional.cosine_similarity(a.flatten(), b.flatten(), dim=0))


@pytest.mark.slow
def test_a_slider_at_plus_and_minus_one_moves_a_prediction_in_opposite_directions(fake_model_dir: Path,
                                                                                  tmp_path: Path) -> None:
    dataset = build_dataset(tmp_path / "data", folder="1_sks shape")
    lora = _train(fake_model_dir, dataset, tmp_path / "out", tmp_path / "run", slider_positive="red circle",
                  slider_negative="blue square", slider_strength=4.0, learning_rate=0.02)
    unet = Unet(fake_model_dir)
    base = unet.predict(CAPTION)
    direction = unet.predict("red circle") - unet.predict("blue square")
    plus = unet.with_lora(lora, 1.0).predict(CAPTION) - base
    minus = unet.with_lora(lora, -1.0).predict(CAPTION) - base
    assert plus.abs().max() > 0
    assert _cosine(plus, direction) > 0.1 and _cosine(minus, direction) < -0.1, \
        (_cosine(plus, direction), _cosine(minus, direction))


@pytest.mark.slow
def test_with_preservation_the_prompt_without_its_trigger_moves_less(fake_model_dir: Path, tmp_path: Path) -> None:
    dataset = build_dataset(tmp_path / "data", folder="1_sks shape")
    unet = Unet(fake_model_dir)
    without_trigger = "shape, grey square"
    base = unet.predict(without_trigger)
    moved = {}
    for name, extra in (("plain", {}), ("preserved", {"preservation_weight": 4.0, "preservation_trigger": "sks"})):
        lora = _train(fake_model_dir, dataset, tmp_path / name, tmp_path / f"run-{name}", learning_rate=0.02, **extra)
        trained = Unet(fake_model_dir).with_lora(lora, 1.0)
        moved[name] = float((trained.predict(without_trigger) - base).norm())
    assert 0 < moved["preserved"] < moved["plain"], moved
