"""The finetune presets of the flow families (presets/<family>_finetune_<tier>gb.toml): each validates on its family's
tiny model, and Validate's memory estimate for the family's published model says it fits its tier's card with margin,
as its comment says."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from trainers.core.options import load_config
from trainers.demo import build_dataset
from trainers.memory_estimate import FIT_MARGIN, estimate_memory
from trainers.preflight.validate import validate

PRESETS = Path(__file__).resolve().parents[2] / "presets"
# each family's published model the preset is for (the estimate reads its sizes from the hub id), and its tiny builder
FAMILIES = {"chroma": ("lodestones/Chroma1-HD", "trainers.models.chroma.tiny", "build_tiny_chroma"),
            "zimage": ("Tongyi-MAI/Z-Image", "trainers.models.zimage.tiny", "build_tiny_zimage"),
            "lumina2": ("Alpha-VLLM/Lumina-Image-2.0", "trainers.models.lumina2.tiny", "build_tiny_lumina2"),
            "qwen_image": ("Qwen/Qwen-Image", "trainers.models.qwen_image.tiny", "build_tiny_qwen_image"),
            "flux2": ("black-forest-labs/FLUX.2-klein-base-9B", "trainers.models.flux2.tiny",
                      "build_tiny_flux2_klein"),
            "hunyuan_image21": ("hunyuanvideo-community/HunyuanImage-2.1-Diffusers",
                                "trainers.models.hunyuan_image21.tiny", "build_tiny_hunyuan_image21"),
            "ernie_image": ("baidu/ERNIE-Image", "trainers.models.ernie_image.tiny", "build_tiny_ernie_image"),
            "hidream": ("HiDream-ai/HiDream-I1-Full", "trainers.models.hidream.tiny", "build_tiny_hidream"),
            "ideogram4": ("ideogram-ai/ideogram-4-fp8", "trainers.models.ideogram4.tiny", "build_tiny_ideogram4"),
            "anima": ("circlestone-labs/Anima", "trainers.models.anima.tiny", "build_tiny_anima_file"),
            "hidream_o1": ("Comfy-Org/HiDream-O1-Image", "trainers.models.hidream_o1.tiny",
                           "build_tiny_hidream_o1_file")}
FOUND = sorted(PRESETS.glob("*_finetune_*gb.toml"))


def _tier_and_family(path: Path) -> tuple[int, str]:
    tier = int(re.fullmatch(r"\w+_finetune_(\d+)gb", path.stem).group(1))  # type: ignore[union-attr]
    return tier, load_config("finetune", path, []).model_family


def test_each_family_that_trains_finetunes_has_a_preset() -> None:
    assert {_tier_and_family(path)[1] for path in FOUND} == set(FAMILIES)


@pytest.mark.parametrize("path", FOUND, ids=[p.stem for p in FOUND])
def test_the_estimate_for_the_published_model_fits_the_presets_card(path: Path) -> None:
    tier, family = _tier_and_family(path)
    cfg = load_config("finetune", path, [f'pretrained_model_name_or_path="{FAMILIES[family][0]}"'])
    estimate = estimate_memory(cfg)
    assert estimate is not None and estimate.source.startswith("the published"), path.name
    assert estimate.card_gb <= FIT_MARGIN * tier, (path.name, estimate.text())
    assert f"~{estimate.card_gb:.1f} GB of the card" in path.read_text(encoding="utf-8"), estimate.text()


@pytest.mark.parametrize("path", FOUND, ids=[p.stem for p in FOUND])
def test_the_preset_validates_on_its_familys_model(path: Path, tmp_path: Path) -> None:
    import importlib

    _, family = _tier_and_family(path)
    _, module, builder = FAMILIES[family]
    model = getattr(importlib.import_module(module), builder)(tmp_path / "model")
    data = build_dataset(tmp_path / "data", size=64)
    cfg = load_config("finetune", path, [f'pretrained_model_name_or_path="{model}"', f'train_data_dir="{data}"',
                                         f'output_dir="{tmp_path / "out"}"'])
    assert [str(issue) for issue in validate(cfg, check_paths=True)] == []
