"""The compare grid names the seed each image was made with (a prompt's --d wins over the job seed)."""
from __future__ import annotations

from pathlib import Path

from PIL import Image

from trainers.core.events import EventWriter
from trainers.generate.grid import read_grid_layout, save_compare_grid
from trainers.generate.options import GenerateConfig
from trainers.generate.plan import Variant, build_plan


def _grid(tmp_path: Path, prompts: list[str], seed: int = 42) -> dict:
    """The layout written into a compare grid of two saves x `prompts` (their images drawn as plain squares)."""
    tmp_path.mkdir(exist_ok=True)
    cfg = GenerateConfig({"model": "m", "mode": "compare", "prompts": prompts, "seed": seed,
                          "compare_loras": ["a.safetensors", "b.safetensors"]})
    variants = [Variant(name, save=name) for name in ("epoch 1", "final")]
    plan = build_plan(cfg, tmp_path, seed, variants)
    for item in plan.items:
        Image.new("RGB", (16, 16), (item.images[0].seed % 256, 0, 0)).save(item.images[0].path)
    job = tmp_path / "job"
    job.mkdir()
    return read_grid_layout(save_compare_grid(cfg, plan, job, EventWriter(job)))


def test_columns_name_the_seeds_their_prompts_set_and_the_title_claims_no_other(tmp_path: Path) -> None:
    layout = _grid(tmp_path, ["a fox --d 1", "a bird --d 2"])
    assert layout["columns"] == ["a fox\nseed 1", "a bird\nseed 2"]
    assert "seed 42" not in layout["title"] and "seed per column" in layout["title"]


def test_one_seed_for_every_image_is_named_once_in_the_title(tmp_path: Path) -> None:
    layout = _grid(tmp_path, ["a fox", "a bird"], seed=7)
    assert layout["columns"] == ["a fox", "a bird"]
    assert "· seed 7 ·" in layout["title"]
    same = _grid(tmp_path / "same", ["a fox --d 3", "a bird --d 3"])
    assert same["columns"] == ["a fox", "a bird"] and "· seed 3 ·" in same["title"]
