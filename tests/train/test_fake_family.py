"""The tests' fake model family (tests/fake_family/) trains, samples and saves through the real paths: a LoRA run
renders its sample prompts to PNGs, and a finetune's diffusers folder and single file load back to the weights
it trained; its encoders' rows depend on the batch, as real ones' do."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch
from PIL import Image

from trainers.demo import build_dataset

from helpers import events, train

FAST = {"resolution": "64", "train_batch_size": 2, "max_data_loader_n_workers": 0, "learning_rate": 1e-3}


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_dataset(tmp_path_factory.mktemp("fake family data"), folder="1_sks shape", size=64)


@pytest.mark.slow  # runs a trainer (in this process)
def test_a_lora_run_renders_its_sample_prompts(fake_model_dir: Path, dataset: Path, tmp_path: Path) -> None:
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("sks shape --s 3 --d 1\nred circle --n blue --l 2.5 --s 2\n", encoding="utf-8")
    assert train("lora", tmp_path / "run", pretrained_model_name_or_path=str(fake_model_dir),
                 train_data_dir=str(dataset), output_dir=str(tmp_path / "out"), **FAST, network_dim=4,
                 network_alpha=2, max_train_steps=2, sample_every_n_steps=2, sample_prompts=str(prompts)) == 0
    samples = [e for e in events(tmp_path / "run") if e["type"] == "sample"]
    assert [(e["step"], e["index"]) for e in samples] == [(2, 0), (2, 1)]
    first = Image.open(samples[0]["path"])
    assert first.size == (64, 64) and "Steps: 3" in first.info["parameters"]
    assert Image.open(samples[1]["path"]).tobytes() != first.tobytes(), "another prompt, seed and sampler run"


@pytest.mark.slow  # runs a trainer (in this process)
def test_a_finetune_saves_a_folder_and_a_single_file_that_load_back(fake_model_dir: Path, dataset: Path,
                                                                     tmp_path: Path) -> None:
    from trainers.models import load_model

    out = tmp_path / "out"
    assert train("finetune", tmp_path / "run", pretrained_model_name_or_path=str(fake_model_dir),
                 train_data_dir=str(dataset), output_dir=str(out), output_name="tuned", **FAST, max_train_steps=2,
                 train_text_encoder=True, save_precision="float", save_model_as="both") == 0
    assert events(tmp_path / "run")[-1]["type"] == "done"
    base = load_model(str(fake_model_dir), "auto", torch.float32)
    folder = load_model(str(out / "tuned"), "auto", torch.float32)
    single = load_model(str(out / "tuned.safetensors"), "auto", torch.float32)
    assert folder.family.name == single.family.name == "fake"
    for part in ("unet", "vae"):
        a, b, c = (getattr(m, part).state_dict() for m in (base, folder, single))
        assert a.keys() == b.keys() == c.keys() and all(torch.equal(b[k], c[k]) for k in b), part
        changed = any(not torch.equal(a[k], b[k]) for k in a)
        assert changed == (part == "unet"), part
    a, b, c = (m.text_encoders[0].state_dict() for m in (base, folder, single))
    assert all(torch.equal(b[k], c[k]) for k in b) and any(not torch.equal(a[k], b[k]) for k in a)


def test_its_encoders_rows_depend_on_the_batch_as_a_real_models_do(fake_model_dir: Path) -> None:
    """What the memo tests (test_memo.py, test_resume.py) need of it: a row encoded alone differs from the same
    row encoded in a batch, as the tiny SD1 VAE's does (test_memo.py), so encoding whole batches would show."""
    from trainers.models import load_model

    model = load_model(str(fake_model_dir), "auto", torch.float32)
    pixels = torch.randn(4, 3, 64, 64, generator=torch.Generator().manual_seed(0))
    ids = model.tokenize(["sks shape, red circle", "a blue square", "a", "b"])
    with torch.no_grad():
        in_batch, alone = model.vae.encode(pixels).latent_dist.mean[:1], model.vae.encode(pixels[:1]).latent_dist.mean
        assert not torch.equal(in_batch, alone)
        batch, _ = model.family.encode_prompts(model.text_encoders, ids, 1)
        alone, _ = model.family.encode_prompts(model.text_encoders, [i[:1] for i in ids], 1)
    assert not torch.equal(batch[:1], alone) and torch.allclose(batch[:1], alone, atol=1e-5)
