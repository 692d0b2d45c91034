"""The validation loss (validation_split): sd-scripts' 4 fixed timesteps, reproducible, and the same on any number
of processes. On the tests' fake model family (tests/fake_family/): the loss does not depend on the model."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from trainers.core.options import TrainConfig
from trainers.data.catalog import build_catalog
from trainers.data.dataset import CaptionedImages, sample_generator
from trainers.demo import build_dataset
from trainers.models import LoadedModel, load_model
from trainers.train.diffusion import NoiseOptions, NoisePredictor
from trainers.train.validation import Validator, shard, validation_timesteps

from helpers import events, fake_family_env, run_trainer, sets, train, two_processes



@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_dataset(tmp_path_factory.mktemp("validation data"), folder="1_sks shape", size=64)


def test_timesteps_are_sd_scripts_linspace() -> None:
    assert validation_timesteps(None, None, 1000) == [200, 400, 600, 800]
    for low, high in ((0, 1000), (100, 900), (0, 999), (17, 503), (500, 500), (1, 7)):
        assert validation_timesteps(low, high, 1000) == np.linspace(low, high, 6, dtype=int)[1:-1].tolist()


def test_batches_are_shared_out_evenly_and_padded() -> None:
    batches = [[0, 1], [2, 3], [4, 5], [6, 7], [8]]
    assert shard(batches, 0, 2) == [([0, 1], True), ([4, 5], True), ([8], True)]
    assert shard(batches, 1, 2) == [([2, 3], True), ([6, 7], True), ([0, 1], False)], "as many passes as rank 0"
    assert shard(batches, 0, 1, max_steps=2) == [([0, 1], True), ([2, 3], True)]
    assert shard(batches, 1, 2, max_steps=1) == [([2, 3], True)], "max_validation_steps counts each process's"
    assert shard([[0]], 1, 3) == [([0], False)]


def _validator(model: LoadedModel, data: Path, seed: int = 5) -> tuple[Validator, CaptionedImages, NoisePredictor]:
    values = TrainConfig("lora", {"train_data_dir": str(data), "resolution": "64", "validation_split": 0.25}).values
    held = CaptionedImages(build_catalog(values).validation, model.tokenize, seed=seed)
    predictor = NoisePredictor(model, None, clip_skip=1, train_text_encoder=False)
    noise = NoiseOptions(seed=0, noise_offset=0.0, min_snr_gamma=None, prediction_type="epsilon")
    return Validator(predictor, model, held, noise, torch.float32, batch_sizes=[2]), held, predictor


def _by_hand(model: LoadedModel, held: CaptionedImages, seed: int) -> float:
    """The mean over images and the 4 timesteps of the plain MSE loss, one image at a time."""
    vae, scheduler = model.vae, model.noise_scheduler
    losses = []
    with torch.no_grad():
        for i in range(len(held)):
            sample = held[(0, i, 0)]
            dist = vae.encode(sample["pixels"][None]).latent_dist
            ids = [ids[None] for ids in sample["input_ids"]]
            hidden, _ = model.family.encode_prompts(model.text_encoders, ids, 1)
            for number, t in enumerate((200, 400, 600, 800)):
                eps = torch.randn(dist.mean.shape[1:], generator=sample_generator(seed, number, i, "latent"))
                latents = (dist.mean + dist.std * eps) * vae.config.scaling_factor
                noise = torch.randn(latents.shape[1:], generator=sample_generator(seed, number, i, "noise"))[None]
                timestep = torch.tensor([t])
                noisy = scheduler.add_noise(latents, noise, timestep)
                pred = model.family.denoise(model.unet, noisy, timestep, hidden, None, None)
                losses.append(F.mse_loss(pred, noise).item())
    return sum(losses) / len(losses)


def test_loss_is_reproducible_follows_the_weights_and_matches_a_hand_computation(fake_model_dir: Path,
                                                                                  dataset: Path) -> None:
    torch.set_flush_denormal(True)  # as a run does (session.py): random tiny weights are slow otherwise
    model = load_model(str(fake_model_dir), "auto", torch.float32)
    validator, held, predictor = _validator(model, dataset)
    assert len(held) == 2 and validator.timesteps == [200, 400, 600, 800]
    predictor.train()
    rng = torch.get_rng_state()
    seen: list[tuple[bool, bool]] = []
    hook = predictor.unet.register_forward_hook(lambda m, a, o: seen.append((m.training, torch.is_grad_enabled())))
    first, batches = validator.loss()
    hook.remove()
    assert seen == [(False, False)] * 4, "one batch at 4 timesteps, in eval mode (LoRA dropouts off), no gradients"
    assert batches == 1 and validator.loss()[0] == first, "the same weights, the same number"
    assert predictor.training and predictor.unet.training, "train mode is given back"
    assert torch.equal(torch.get_rng_state(), rng), "training's random stream is left as it was"
    assert first == pytest.approx(_by_hand(validator.model, held, seed=5), rel=1e-5)
    with torch.no_grad():
        predictor.unet.conv_in.weight.mul_(1.5)
    assert abs(validator.loss()[0] - first) > 1e-4, "other weights, another loss"
    other, _, _ = _validator(model, dataset, seed=6)
    assert other.loss()[0] != first, "validation_seed picks the noise"


@pytest.mark.slow
def test_lora_run_reports_validation_at_its_steps_and_epochs(fake_model_dir: Path, dataset: Path,
                                                             tmp_path: Path) -> None:
    from trainers.methods.lora.file_format import read_lora_file

    # 8 images: 6 trained (3 steps of 2 an epoch), 2 held out; 4 steps = 2 epochs
    code = train("lora", tmp_path / "run", pretrained_model_name_or_path=str(fake_model_dir),
                 train_data_dir=str(dataset),
                 output_dir=str(tmp_path / "out"), resolution="64", train_batch_size=2, max_train_steps=4,
                 max_data_loader_n_workers=0, network_dim=4, network_alpha=2, learning_rate=1e-3,
                 validation_split=0.25, validate_every_n_steps=2, logging_dir=str(tmp_path / "tb"))
    assert code == 0
    evs = events(tmp_path / "run")
    found = [(e["step"], e["epoch"], e["kind"]) for e in evs if e["type"] == "validation"]
    assert found == [(2, 1, "step"), (3, 1, "epoch"), (4, 2, "step"), (4, 2, "epoch")]
    losses = [e["loss"] for e in evs if e["type"] == "validation"]
    assert losses[2] == losses[3], "the same weights at step 4: the same loss"
    assert len(set(losses[:3])) == 3, "training changes it"
    assert all(e["batches"] == 1 and e["divergence"] is not None for e in evs if e["type"] == "validation")
    dataset_event = next(e for e in evs if e["type"] == "dataset")
    assert dataset_event["validation_images"] == 2
    _, meta = read_lora_file(tmp_path / "out" / "lora.safetensors")
    assert (meta["ss_validation_split"], meta["ss_validate_every_n_steps"], meta["ss_num_validation_images"]) == (
        "0.25", "2", "2")
    assert any(p.name.startswith("events.out.tfevents") for p in (tmp_path / "tb").rglob("*"))


@pytest.mark.slow
def test_two_processes_give_the_validation_loss_of_one(fake_model_dir: Path, dataset: Path, tmp_path: Path) -> None:
    values = dict(pretrained_model_name_or_path=str(fake_model_dir), train_data_dir=str(dataset), resolution="64",
                  max_data_loader_n_workers=0, network_dim=4, network_alpha=2, learning_rate=1e-3,
                  save_precision="float", keep_global_batch=True, train_batch_size=2, max_train_steps=2,
                  validation_split=0.25, validate_every_n_steps=1, validate_every_n_epochs=10)
    assert train("lora", tmp_path / "run1", **values, output_dir=str(tmp_path / "one")) == 0  # one: in this process
    two = run_trainer(sets(**values, output_dir=str(tmp_path / "two"), num_processes=2), tmp_path / "run2",
                      two_processes(), env=fake_family_env(ACCELERATE_USE_CPU="1"))
    assert two.returncode == 0, two.stderr[-3000:]
    a = [(e["step"], e["loss"]) for e in events(tmp_path / "run1") if e["type"] == "validation"]
    b = [(e["step"], e["loss"]) for e in events(tmp_path / "run2") if e["type"] == "validation"]
    assert [s for s, _ in a] == [s for s, _ in b] == [1, 2]
    assert all(x == pytest.approx(y, rel=1e-5) for (_, x), (_, y) in zip(a, b)), (a, b)
