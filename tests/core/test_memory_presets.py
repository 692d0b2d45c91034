"""The VAM-tier presets (presets/tier_*gb_*.toml): one per family and tier, each loads as a LoRA config, and the
memory estimate says it fits its tier's card with margin."""
from __future__ import annotations

import re
from pathlib import Path

from trainers.memory_estimate import FIT_MARGIN, estimate_memory
from trainers.core.options import load_config

PRESETS = Path(__file__).resolve().parents[2] / "presets"
TIERS = (8, 12, 16, 24, 48)
FAMILIES = ("sd1", "sdxl", "sd3", "flux")


def test_every_family_has_a_preset_for_every_tier_and_each_fits_its_card() -> None:
    found = {}
    for path in sorted(PRESETS.glob("*tier*.toml")):
        tier, family = re.fullmatch(r"tier_(\d+)gb_(\w+?)_lora", path.stem).groups()
        cfg = load_config("lora", path, [])
        assert cfg.model_family == family, path.name
        estimate = estimate_memory(cfg)
        assert estimate is not None and estimate.source.startswith("the published"), path.name
        assert estimate.card_gb <= FIT_MARGIN * int(tier), (path.name, estimate.text())
        assert f"~{estimate.card_gb:.1f} GB of the card" in path.read_text(encoding="utf-8"), path.name
        found[int(tier), family] = estimate.card_gb
    assert set(found) == {(tier, family) for tier in TIERS for family in FAMILIES}
    for family in FAMILIES:  # a bigger card buys speed (less quantization and offload, bigger batches), not idle room
        assert found[24, family] > found[8, family]
