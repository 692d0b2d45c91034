"""Every VRAM-tier preset (presets/*<N>gb*.toml) fits its card in both passes by the estimate (issue 42 item 2): the
steps within 90% of the card, and the pass that encodes the captions once before them (the text encoders alone on the
card, the denoiser after) within the card; each preset that caches text-encoder outputs keeps them on disk, so a
second run does not load its text encoders onto the card again."""
from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
from test_memory_presets import FLOW_MODELS, FLOW_PRESETS, PRESETS, _comment, _flow_preset

from trainers.core.options import load_config
from trainers.memory_estimate import FIT_MARGIN, caption_pass_fits, estimate_memory, fits

TIER_PRESETS = sorted(PRESETS.glob("*[0-9]gb*.toml"))
# The family a preset without model_family is estimated as (it names its model in pretrained_model_name_or_path)
FAMILY_OF_NAME = {"flux_dev": "flux", "flux_kontext": "flux_kontext", "sdxl": "sdxl", "sd15": "sd1",
                  "qwen_image_edit": "qwen_image_edit"}
# Presets whose steps do not fit by the estimate, with what is left for whom (caption-pass keys are this test's)
STEPS_OVER: dict[str, str] = {}


def _tier(path: Path) -> int:
    return int(re.search(r"(\d+)gb", path.stem).group(1))  # type: ignore[union-attr]


def _overrides(path: Path) -> list[str]:
    """The published model the preset is estimated for: a FLUX.2 klein's size as its comment names it, a flow
    preset's family model, or the family a preset without model_family is for."""
    klein = re.search(r"klein base (\d+B)", _comment(path))
    if klein:
        return [f'pretrained_model_name_or_path="{FLOW_MODELS["flux2_klein"].format(size=klein.group(1))}"']
    if path in FLOW_PRESETS:
        return [f'pretrained_model_name_or_path="{_flow_preset(path)[2]}"']
    family = next((f for prefix, f in FAMILY_OF_NAME.items() if path.stem.startswith(prefix)), None)
    if family and "model_family" not in path.read_text(encoding="utf-8"):
        return [f'model_family="{family}"']
    return []


@pytest.mark.parametrize("path", TIER_PRESETS, ids=[p.stem for p in TIER_PRESETS])
def test_a_tier_preset_fits_its_card_in_both_passes(path: Path) -> None:
    tier = _tier(path)
    cfg = load_config(tomllib.loads(path.read_text(encoding="utf-8"))["method"], path, _overrides(path))
    estimate = estimate_memory(cfg)
    assert estimate is not None, path.name
    assert caption_pass_fits(estimate, tier), (path.name, estimate.text())
    if path.stem in STEPS_OVER:
        assert not fits(estimate, tier), f"{path.name} fits now: drop it from STEPS_OVER"
        return
    assert fits(estimate, tier), (path.name, f"over {FIT_MARGIN:.0%} of {tier} GB", estimate.text())
    if cfg.cache_text_encoder_outputs:
        assert cfg.values.get("cache_text_encoder_outputs_to_disk"), (path.name, "a second run would encode again")


def test_the_caption_pass_is_the_peak_where_the_text_encoders_outweigh_the_steps() -> None:
    """Qwen-Image 2.1's 8 GB preset: its Qwen3-VL 8B in nf4 takes more of the card while it encodes the captions
    than the nf4 transformer with 8 of its blocks offloaded does in the steps; the line says so."""
    path = PRESETS / "qwen_image21_lora_8gb.toml"
    estimate = estimate_memory(load_config("lora", path, _overrides(path)))
    assert estimate is not None and estimate.peak_pass == "captions"
    assert "the peak is this pass, not the steps" in estimate.text()
