"""End to end: `python -m trainers dreambooth` with class images topped up by generation, and prior loss, on the tests'
fake model family (tests/fake_family/: its diffusers-style folder names the denoiser `denoiser/`)."""
from __future__ import annotations

from pathlib import Path

import pytest

import torch
from PIL import Image

from trainers.demo import build_dataset

from helpers import events, fake_family_env, run_trainer
from test_finetune import full_args

pytestmark = pytest.mark.slow


def test_dreambooth_generates_missing_class_images_and_trains_with_them(fake_model_dir: Path, tmp_path: Path) -> None:
    dataset = build_dataset(tmp_path / "data", folder="2_sks shape")
    class_dir = tmp_path / "reg" / "1_shape"
    class_dir.mkdir(parents=True)
    Image.new("RGB", (64, 64), (120, 120, 120)).save(class_dir / "mine.png")  # one present, one to generate
    out = tmp_path / "out"
    args = full_args(fake_model_dir, dataset, out, output_name="db", max_train_steps=3,
                     reg_data_dir=str(tmp_path / "reg"), class_prompt="shape", num_class_images=2, prior_loss_weight=0.5, sample_steps=2,
                     train_text_encoder=True, stop_text_encoder_training=1, use_ema="cpu", ema_decay=0.5,
                     save_ema="both", save_model_as="both")
    result = run_trainer(args, tmp_path / "run", method="dreambooth", env=fake_family_env())
    assert result.returncode == 0, result.stderr[-3000:]
    assert sorted(p.name for p in class_dir.iterdir()) == ["class_00.png", "mine.png"]
    evs = events(tmp_path / "run")
    assert [e["count"] for e in evs if e["type"] == "class_images"] == [1]
    (dataset_event,) = [e for e in evs if e["type"] == "dataset"]
    reg = [s for s in dataset_event["subsets"] if s["kind"] == "reg"]
    assert [(s["images"]) for s in reg] == [2], reg
    assert any("text encoder training stopped at step 1" in e.get("message", "") for e in evs)
    assert [e["step"] for e in evs if e["type"] == "progress"] == [1, 2, 3]
    assert (out / "db" / "denoiser").is_dir() and evs[-1]["type"] == "done"
    # save_ema = both: trained and EMA weights; save_model_as = both: diffusers folder and single file
    assert sorted(p.name for p in out.iterdir()) == ["db", "db-ema", "db-ema.safetensors", "db.safetensors"]
    assert evs[-1]["output"] == str(out / "db")
    from safetensors.torch import load_file

    trained = load_file(out / "db" / "denoiser" / "diffusion_pytorch_model.safetensors")
    averaged = load_file(out / "db-ema" / "denoiser" / "diffusion_pytorch_model.safetensors")
    assert trained.keys() == averaged.keys() and any(not torch.equal(trained[k], averaged[k]) for k in trained)
    # A second run finds the class folder complete: nothing generated.
    again = run_trainer(args + ["--set", "max_train_steps=1", "--set", "overwrite_output=true"], tmp_path / "run2",
                        method="dreambooth", env=fake_family_env())
    assert again.returncode == 0, again.stderr[-3000:]
    assert not [e for e in events(tmp_path / "run2") if e["type"] == "class_images"]
