"""Bring your kohya setup: configs of the corpus (kohya_ss JSONs, sd-scripts TOMLs) train as they are, with only their
paths pointed at the tiny demo model and data and the size and length made small."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from helpers import events, run_trainer, sets

from trainers.demo import build_dataset

pytestmark = pytest.mark.slow  # every test here runs a trainer

CORPUS = Path(__file__).resolve().parents[1] / "adapters" / "kohya_corpus"
CONFIGS = [  # (file, method, family of the tiny model its paths point at, other paths it names)
    ("kohya_ss/test/config/locon-AdamW.json", "lora", "sd1", {}),
    ("kohya_ss/test/config/dreambooth-AdamW.json", "dreambooth", "sd1", {}),
    ("kohya_ss/presets/lora/SDXL - LoRA AI_Now ADamW v1.0.json", "lora", "sdxl", {}),
    ("sd_scripts/sections_sd15_lora.toml", "lora", "sd1", {}),
    ("sd_scripts/kohya_ss_lora_locon.toml", "lora", "sd1", {"sample_prompts": "<prompts>"}),
    # FLUX.1 as kohya_ss users have it: flux1-dev.safetensors with ae, clip_l and t5xxl files, fp8 base, 8-bit AdamW
    ("kohya_ss/presets/lora/flux1D - adamw8bit fp8.json", "lora", "flux files", {"t5xxl_max_token_length": 32}),
    # SD3 Medium as kohya_ss's SD3 Dreambooth runs it: the single file with clip_l, clip_g and t5xxl files
    ("kohya_ss/presets/dreambooth/sd3_bdsqlsz_v2.json", "dreambooth", "sd3 files", {"t5xxl_max_token_length": 32}),
]


def _files_of(build: Any, root: Path) -> dict[str, str]:
    from trainers.models.tiny_flow import write_reference_files

    files = write_reference_files(build(root / "diffusers", reference_heads=True), root / "files")
    return {k: str(v) for k, v in files.items()}


@pytest.fixture(scope="module")
def flux_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    from trainers.models.flux.tiny import build_tiny_flux

    return _files_of(build_tiny_flux, tmp_path_factory.mktemp("flux"))


@pytest.fixture(scope="module")
def sd3_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    from trainers.models.sd3.tiny import build_tiny_sd3

    return _files_of(build_tiny_sd3, tmp_path_factory.mktemp("sd3"))


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Eight 64x64 images (square, so that every bucketing setting keeps them all in one bucket)."""
    from PIL import Image

    root = build_dataset(tmp_path_factory.mktemp("kohya data"), folder="1_sks shape", size=64)
    for path in (root / "1_sks shape").glob("*.png"):
        with Image.open(path) as image:
            square = image.crop((0, 0, 64, 64))
        square.save(path)
    return root


@pytest.mark.parametrize("source, method, family, extra", CONFIGS, ids=[c[0] for c in CONFIGS])
def test_corpus_config_trains_two_steps(source: str, method: str, family: str, extra: dict[str, object], data: Path,
                                        tmp_path: Path, request: pytest.FixtureRequest) -> None:
    if family in ("flux files", "sd3 files"):
        model_paths = request.getfixturevalue(family.replace(" ", "_"))
    else:
        model_paths = {"pretrained_model_name_or_path": str(
            request.getfixturevalue("tiny_sdxl_dir" if family == "sdxl" else "tiny_sd1_dir"))}
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("sks shape, red circle --s 2\n", encoding="utf-8")
    small = {**model_paths, "train_data_dir": str(data), "output_dir": str(tmp_path / "out"),
             "logging_dir": "", "resolution": "64", "min_bucket_reso": 64, "max_bucket_reso": 128,
             # 8 images, batch 4: one epoch is 2 steps (a file's epochs win over its steps, as in sd-scripts)
             "max_train_epochs": 1, "max_train_steps": 2, "train_batch_size": 4, "gradient_accumulation_steps": 1,
             "max_data_loader_n_workers": 0, "sample_steps": 2,  # the save's health check renders its first prompt
             **{k: str(prompts) if v == "<prompts>" else v for k, v in extra.items()}}
    run_dir = tmp_path / "run"
    # a process each: accelerate keeps one mixed precision per process, and the files differ
    result = run_trainer(["--config", str(CORPUS / source), *sets(**small)], run_dir, method=method)
    assert result.returncode == 0, result.stderr[-3000:]
    evs = events(run_dir)
    assert [e["step"] for e in evs if e["type"] == "progress"] == [1, 2]
    assert evs[-1]["type"] == "done" and Path(evs[-1]["output"]).exists()
