"""End to end: `python -m trainers finetune` on a tiny SD1 model, and the diffusers folder it writes."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from trainers.demo import build_dataset

from helpers import FAST, events, fixed_seed_image, run_trainer, sets

pytestmark = pytest.mark.slow

FULL_FAST = [kv for kv in FAST if not kv.startswith("network_")]


def full_args(model: Path, dataset: Path | None, out: Path, **values: object) -> list[str]:
    data = {"train_data_dir": str(dataset)} if dataset is not None else {}
    return [*sets(pretrained_model_name_or_path=str(model), output_dir=str(out), **data, **values),
            *[a for kv in FULL_FAST for a in ("--set", kv)]]


def metadata_dataset(root: Path) -> Path:
    """The demo images as a metadata-JSON dataset (one JSON a file: path, tags, score)."""
    images = build_dataset(root / "images", folder="1_sks shape")
    boards = root / "boards"
    boards.mkdir(parents=True)
    for png in sorted(images.rglob("*.png")):
        tags = png.with_suffix(".txt").read_text(encoding="utf-8").split(", ")
        (boards / f"{png.stem}.json").write_text(json.dumps({"path": str(png), "tags": tags, "score": 8}))
    return boards


@pytest.fixture(scope="module")
def finetune_run(tiny_sd1_dir: Path, tmp_path_factory: pytest.TempPathFactory):
    base = tmp_path_factory.mktemp("finetune")
    out = base / "out"
    result = run_trainer(full_args(tiny_sd1_dir, None, out, metadata_dir=str(metadata_dataset(base)),
                                   output_name="my model", max_train_steps=3, train_text_encoder=True,
                                   save_precision="float"),
                         base / "run", method="finetune")
    return out, base / "run", result


def test_finetune_folder_loads_in_diffusers_and_changes_the_image(finetune_run, tiny_sd1_dir: Path) -> None:
    from diffusers import StableDiffusionPipeline

    out, run_dir, result = finetune_run
    assert result.returncode == 0, result.stderr[-3000:]
    folder = out / "my model"
    evs = events(run_dir)
    assert evs[-1]["type"] == "done" and evs[-1]["output"] == str(folder)
    assert [e["step"] for e in evs if e["type"] == "progress"] == [1, 2, 3]
    dataset = next(e for e in evs if e["type"] == "dataset")
    assert [(s["kind"], s["images"]) for s in dataset["subsets"]] == [("metadata", 8)]
    assert sorted(p.name for p in out.iterdir()) == ["my model"], "no temp folders left behind"
    for part in ("unet", "vae", "text_encoder", "tokenizer", "scheduler", "model_index.json"):
        assert (folder / part).exists(), part
    base = fixed_seed_image(StableDiffusionPipeline.from_pretrained(tiny_sd1_dir))
    tuned = fixed_seed_image(StableDiffusionPipeline.from_pretrained(folder))
    assert (base - tuned).abs().max() > 1e-3


def test_finetune_with_train_text_encoder_changes_the_text_encoder(finetune_run, tiny_sd1_dir: Path) -> None:
    from diffusers import UNet2DConditionModel
    from transformers import CLIPTextModel

    out, _, result = finetune_run
    assert result.returncode == 0, result.stderr[-3000:]
    before = CLIPTextModel.from_pretrained(tiny_sd1_dir / "text_encoder").state_dict()
    after = CLIPTextModel.from_pretrained(out / "my model" / "text_encoder").state_dict()
    assert before.keys() == after.keys()
    assert any(not torch.equal(before[k], after[k]) for k in before)
    vae_before = json.loads((tiny_sd1_dir / "vae" / "config.json").read_text())
    vae_after = json.loads((out / "my model" / "vae" / "config.json").read_text())
    assert vae_before["latent_channels"] == vae_after["latent_channels"]
    unet = UNet2DConditionModel.from_pretrained(out / "my model" / "unet")
    assert next(unet.parameters()).dtype == torch.float32
