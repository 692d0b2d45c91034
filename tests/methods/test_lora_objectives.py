"""LoRA objectives with the base model's own predictions as targets: a slider (LECO / ai-toolkit concept sliders)
and preservation without class images (ai-toolkit's differential output preservation), on the tiny SD1.x model."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from trainers.core.options import load_config
from trainers.demo import build_dataset
from trainers.preflight.validate import validate

from helpers import FAST, run_trainer, sets

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
    args = [*sets(pretrained_model_name_or_path=str(model), train_data_dir=str(dataset), output_dir=str(out),
                  network_train_unet_only=True, max_train_steps=2, seed=1, **values),
            *[a for kv in FAST for a in ("--set", kv)], "--set", "train_batch_size=1"]
    result = run_trainer(args, run_dir)
    assert result.returncode == 0, result.stderr[-3000:]
    return out / "lora.safetensors"


class Unet:
    """The base pipeline's UNet at one fixed noisy latent, with or without a LoRA at a weight."""

    def __init__(self, model: Path) -> None:
        from diffusers import StableDiffusionPipeline

        self.pipe = StableDiffusionPipeline.from_pretrained(str(model), safety_checker=None)
        generator = torch.Generator().manual_seed(0)
        self.latent = torch.randn((1, 4, 8, 8), generator=generator)
        self.loaded = 0

    def predict(self, prompt: str) -> torch.Tensor:
        with torch.no_grad():
            hidden = self.pipe.encode_prompt(prompt, "cpu", 1, False)[0]
            return self.pipe.unet(self.latent, torch.tensor([500]), hidden).sample

    def with_lora(self, lora: Path, weight: float) -> "Unet":
        if not self.loaded:
            self.pipe.load_lora_weights(str(lora.parent), weight_name=lora.name, adapter_name="trained")
            self.loaded = 1
        self.pipe.set_adapters(["trained"], adapter_weights=[weight])
        return self


def _cosine(a: torch.Tensor, b: torch.Tensor) -> float:
    return float(torch.nn.functional.cosine_similarity(a.flatten(), b.flatten(), dim=0))


@pytest.mark.slow
def test_a_slider_at_plus_and_minus_one_moves_a_prediction_in_opposite_directions(tiny_sd1_dir: Path,
                                                                                  tmp_path: Path) -> None:
    dataset = build_dataset(tmp_path / "data", folder="1_sks shape")
    lora = _train(tiny_sd1_dir, dataset, tmp_path / "out", tmp_path / "run", slider_positive="red circle",
                  slider_negative="blue square", slider_strength=4.0, learning_rate=0.02)
    unet = Unet(tiny_sd1_dir)
    base = unet.predict(CAPTION)
    direction = unet.predict("red circle") - unet.predict("blue square")
    plus = unet.with_lora(lora, 1.0).predict(CAPTION) - base
    minus = unet.with_lora(lora, -1.0).predict(CAPTION) - base
    assert plus.abs().max() > 0
    assert _cosine(plus, direction) > 0.1 and _cosine(minus, direction) < -0.1, \
        (_cosine(plus, direction), _cosine(minus, direction))


@pytest.mark.slow
def test_with_preservation_the_prompt_without_its_trigger_moves_less(tiny_sd1_dir: Path, tmp_path: Path) -> None:
    dataset = build_dataset(tmp_path / "data", folder="1_sks shape")
    unet = Unet(tiny_sd1_dir)
    without_trigger = "shape, grey square"
    base = unet.predict(without_trigger)
    moved = {}
    for name, extra in (("plain", {}), ("preserved", {"preservation_weight": 4.0, "preservation_trigger": "sks"})):
        lora = _train(tiny_sd1_dir, dataset, tmp_path / name, tmp_path / f"run-{name}", learning_rate=0.02, **extra)
        trained = Unet(tiny_sd1_dir).with_lora(lora, 1.0)
        moved[name] = float((trained.predict(without_trigger) - base).norm())
    assert 0 < moved["preserved"] < moved["plain"], moved
