"""The VRAM-tier presets (presets/tier_*gb_*.toml): one per family and tier, each loads as a LoRA config, and the
memory estimate says it fits its tier's card with margin; the flow families' LoRA presets (<family>_lora_<N>gb.toml)
cover the tiers each can hold, fit their card for the family's published model and validate on its tiny model."""
from __future__ import annotations

import importlib
import re
from collections.abc import Callable
from pathlib import Path

import pytest
from test_finetune_presets import FAMILIES as FINETUNE_FAMILIES

from trainers.core.options import load_config
from trainers.demo import build_dataset
from trainers.memory_estimate import FIT_MARGIN, estimate_memory, model_size, offload_share
from trainers.preflight.validate import validate

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


# The flow families' own LoRA presets (presets/<name>_lora_<tier>gb.toml): which tiers each holds (docs/memory.md says
# why the others are missing), and the published model each is estimated for; FLUX.2 klein's size is the one its
# comment names.
FLOW_TIERS = {"chroma": TIERS, "zimage": TIERS, "lumina2": TIERS, "qwen_image": TIERS, "qwen_image21": TIERS,
              "krea2": TIERS, "flux2_klein": TIERS, "flux2_dev": (24, 48), "hunyuan_image21": TIERS,
              "hidream": (12, 16, 24, 48), "ernie_image": TIERS, "ideogram4": TIERS, "anima": TIERS,
              "hidream_o1": TIERS}
FLOW_MODELS = {"chroma": "lodestones/Chroma1-HD", "zimage": "Tongyi-MAI/Z-Image",
               "lumina2": "Alpha-VLLM/Lumina-Image-2.0", "qwen_image": "Qwen/Qwen-Image",
               "qwen_image21": "Qwen/Qwen-Image-2.1", "krea2": "krea-ai/krea-2",
               "flux2_klein": "black-forest-labs/FLUX.2-klein-base-{size}", "flux2_dev": "black-forest-labs/FLUX.2-dev",
               "hunyuan_image21": "hunyuanvideo-community/HunyuanImage-2.1-Diffusers",
               "hidream": "HiDream-ai/HiDream-I1-Full", "ernie_image": "baidu/ERNIE-Image",
               "ideogram4": "ideogram-ai/ideogram-4-fp8", "anima": "circlestone-labs/Anima",
               "hidream_o1": "Comfy-Org/HiDream-O1-Image"}
FLOW_TINY = {**{family: (module, builder) for family, (_, module, builder) in FINETUNE_FAMILIES.items()},
             "flux2_klein": FINETUNE_FAMILIES["flux2"][1:],
             "flux2_dev": ("trainers.models.flux2.tiny", "build_tiny_flux2"),
             "qwen_image21": ("trainers.models.qwen_image21.tiny", "build_tiny_qwen_image21"),
             "krea2": ("trainers.models.krea2.tiny", "build_tiny_krea2"),
             "hunyuan_image21": ("trainers.models.hunyuan_image21.tiny", "build_tiny_hunyuan_image21"),
             "hidream": ("trainers.models.hidream.tiny", "build_tiny_hidream"),
             "ernie_image": ("trainers.models.ernie_image.tiny", "build_tiny_ernie_image"),
             "ideogram4": ("trainers.models.ideogram4.tiny", "build_tiny_ideogram4")}
FLOW_PRESETS = sorted(path for path in PRESETS.glob("*_lora_*gb.toml")
                      if re.fullmatch(rf"({'|'.join(FLOW_TIERS)})_lora_\d+gb", path.stem))


def _flow_preset(path: Path) -> tuple[str, int, str]:
    """(its name's family, its tier, the hub id of the published model it is for)."""
    name, tier = re.fullmatch(r"(\w+)_lora_(\d+)gb", path.stem).groups()  # type: ignore[union-attr]
    size = re.search(r"klein base (\d+B)", _comment(path))
    return name, int(tier), FLOW_MODELS[name].format(size=size.group(1) if size else "")


def _comment(path: Path) -> str:
    """The preset's header comment as one line."""
    lines = path.read_text(encoding="utf-8").splitlines()
    return " ".join(line.lstrip("# ") for line in lines if line.startswith("#"))


def test_each_flow_family_has_a_lora_preset_for_every_tier_it_can_hold() -> None:
    found = {(name, tier) for name, tier, _ in map(_flow_preset, FLOW_PRESETS)}
    assert found == {(name, tier) for name, tiers in FLOW_TIERS.items() for tier in tiers}


@pytest.mark.parametrize("path", FLOW_PRESETS, ids=[p.stem for p in FLOW_PRESETS])
def test_a_flow_lora_preset_fits_its_card_for_the_published_model(path: Path) -> None:
    _, tier, model = _flow_preset(path)
    cfg = load_config("lora", path, [f'pretrained_model_name_or_path="{model}"'])
    estimate = estimate_memory(cfg)
    assert estimate is not None and not estimate.source.startswith("the model's files"), path.name
    assert estimate.card_gb <= FIT_MARGIN * tier, (path.name, estimate.text())
    if "GB of the card" in _comment(path):  # an estimate the comment states is the current one
        assert f"~{estimate.card_gb:.1f} GB of the card" in _comment(path), estimate.text()
    # offloading more than three quarters of the blocks costs more speed than the tier presets accept
    assert offload_share(cfg.values, model_size(cfg).swap_units) <= 0.75, path.name  # type: ignore[union-attr]
    assert _caption_pass_gb(path, model) <= tier, (path.name, "the text encoders do not fit while they encode")


def _caption_pass_gb(path: Path, model: str) -> float:
    """The card while the captions are encoded once before the first step (the estimate's `caching`)."""
    cfg = load_config("lora", path, [f'pretrained_model_name_or_path="{model}"'])
    return estimate_memory(cfg).caching_card_gb  # type: ignore[union-attr]


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    """The tiny model of a preset name's family, built once for the module."""
    built: dict[str, Path] = {}

    def build(name: str) -> Path:
        if name not in built:
            module, builder = FLOW_TINY[name]
            built[name] = getattr(importlib.import_module(module), builder)(tmp_path_factory.mktemp(name))
        return built[name]
    return build


@pytest.mark.parametrize("path", FLOW_PRESETS, ids=[p.stem for p in FLOW_PRESETS])
def test_a_flow_lora_preset_validates_on_its_familys_tiny_model(path: Path, tiny_model: Callable[[str], Path],
                                                                 tmp_path: Path) -> None:
    data = build_dataset(tmp_path / "data", size=64)
    cfg = load_config("lora", path, [f'pretrained_model_name_or_path="{tiny_model(_flow_preset(path)[0])}"',
                                     f'train_data_dir="{data}"', f'output_dir="{tmp_path / "out"}"'])
    assert [str(issue) for issue in validate(cfg, check_paths=True)] == []
