"""The trainer's pieces one by one: step plan, optimizers, schedules, noise, text encoding, families."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from trainers.core.options import TrainConfig
from trainers.core.plan import plan_steps
from trainers.core.saves import save_name
from trainers.data.dataset import sample_generator
from trainers.models import ModelLoadError, detect_family, family, load_model
from trainers.train.diffusion import _per_sample, min_snr_weights
from trainers.train.optim import build_lr_scheduler, build_optimizer, warmup_steps
from trainers.train.progress import ProgressMeter


def test_step_plan_arithmetic() -> None:
    # 10 images x 4 repeats x 3 epochs / (batch 2 x 2 processes x accumulation 1)
    plan = plan_steps(40, 2, 2, 1, max_epochs=3, max_steps=None)
    assert (plan.steps_per_epoch, plan.total_steps, plan.global_batch) == (10, 30, 4)
    by_steps = plan_steps(40, 2, 1, 2, None, 25)
    assert (by_steps.steps_per_epoch, by_steps.epochs, by_steps.total_steps) == (10, 3, 25)
    assert plan_steps(40, 2, 1, 1, 2, 5).total_steps == 40  # epochs win, as in sd-scripts
    assert plan_steps(41, 2, 1, 1, 1, None).steps_per_epoch == 21  # a partial last batch still trains


@pytest.mark.parametrize("name", ["AdamW", "AdamW8bit", "Lion8bit", "Adafactor"])
def test_every_optimizer_steps(name: str) -> None:
    param = torch.nn.Parameter(torch.ones(64, 64))
    opt = build_optimizer(TrainConfig("lora", {"optimizer_type": name, "learning_rate": 1e-2,
                                               "optimizer_args": ["weight_decay=0.0"]}), [{"params": [param]}])
    param.grad = torch.ones_like(param)
    opt.step()
    assert param.detach().mean() < 1.0, f"{name} did not move the weights"


def lrs(scheduler: str, warmup: float, total: int = 100, num_processes: int = 1, **extra: object) -> list[float]:
    cfg = TrainConfig("lora", {"lr_scheduler": scheduler, "lr_warmup_steps": warmup, "learning_rate": 1.0, **extra})
    param = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.SGD([param], lr=1.0)
    sched = build_lr_scheduler(cfg, opt, total, num_processes)
    out = []
    for _ in range(total):
        out.append(sched.get_last_lr()[0])
        opt.step()
        sched.step()
    return out


def test_warmup_as_steps_or_ratio() -> None:
    assert warmup_steps(TrainConfig("lora", {"lr_warmup_steps": 0.1}), 200) == 20
    assert warmup_steps(TrainConfig("lora", {"lr_warmup_steps": 7}), 200) == 7
    ratio = lrs("constant_with_warmup", 0.1)
    assert ratio[0] == 0 and ratio[5] == pytest.approx(0.5) and ratio[10:] == [1.0] * 90
    assert lrs("constant_with_warmup", 10) == ratio


@pytest.mark.parametrize("warmup", [4, 0.25])
@pytest.mark.parametrize("scheduler", ["cosine", "linear", "constant_with_warmup"])
def test_lr_at_each_share_of_training_is_the_same_on_one_and_two_processes(scheduler: str, warmup: float) -> None:
    from trainers.core.plan import plan_steps

    one, two = (plan_steps(32, 2, p, 1, 2, None) for p in (1, 2))  # 2 epochs of 32 images, batch 2 a process
    assert (one.total_steps, two.total_steps) == (32, 16)
    single = lrs(scheduler, warmup, one.total_steps, max_train_epochs=2)
    double = lrs(scheduler, warmup, two.total_steps, num_processes=2, max_train_epochs=2)
    assert double == pytest.approx(single[::2])  # step j of 16 is the same share of training as step 2j of 32
    assert max(single) == pytest.approx(1.0) and single[0] == 0.0


@pytest.mark.parametrize("scheduler", ["constant", "cosine", "cosine_with_restarts", "linear", "polynomial"])
def test_schedules_have_their_shape(scheduler: str) -> None:
    values = lrs(scheduler, 0, lr_scheduler_num_cycles=2, lr_scheduler_power=2.0)
    if scheduler == "constant":
        assert set(values) == {1.0}
    else:
        assert values[0] == 1.0 and values[-1] < 0.1
    if scheduler == "cosine_with_restarts":
        assert max(values[55:]) > 0.9  # the second cycle starts high again


def test_noise_is_seeded_per_sample_not_per_batch() -> None:
    draw = lambda g: torch.randn(4, 8, 8, generator=g)  # noqa: E731
    pair = _per_sample(torch.tensor([[0, 1], [0, 2]]), 42, "noise", draw)
    alone = _per_sample(torch.tensor([[0, 2]]), 42, "noise", draw)
    assert torch.equal(pair[1], alone[0])
    other_epoch = _per_sample(torch.tensor([[1, 2]]), 42, "noise", draw)
    assert not torch.equal(alone, other_epoch)
    assert not torch.equal(draw(sample_generator(42, 0, 2, "noise")), draw(sample_generator(42, 0, 2, "timestep")))


def test_min_snr_weights() -> None:
    from diffusers import DDPMScheduler

    sched = DDPMScheduler(beta_schedule="scaled_linear", beta_start=0.00085, beta_end=0.012)
    t = torch.tensor([0, 500, 999])
    eps = min_snr_weights(sched, t, 5.0, "epsilon")
    assert eps[0] < 0.01 and eps[2] == pytest.approx(1.0)  # low noise is down-weighted
    v = min_snr_weights(sched, t, 5.0, "v_prediction")
    assert torch.all(v <= 1.0) and v[2] < 1.0


def test_progress_rates_follow_a_recent_window(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = iter([0.0] + [10.0 + i for i in range(30)] + [39.0 + 0.5 * i for i in range(1, 11)])
    monkeypatch.setattr("trainers.train.progress.time.perf_counter", lambda: next(clock))
    meter = ProgressMeter(total_steps=100, images_per_step=4, window=10)
    meter.start()
    event = None
    for step in range(1, 41):
        event = meter.update(step, 1, 1, loss=1.0, lr=1e-4, data_wait_s=0.1)
    assert event.it_per_s == pytest.approx(2.0)  # the last 10 steps, not the slow first one
    assert event.images_per_s == pytest.approx(8.0)
    assert event.eta_s == pytest.approx(30.0)
    assert event.data_share == pytest.approx(0.2)


def test_save_names_follow_kohya() -> None:
    assert save_name("x") == "x"
    assert save_name("x", epoch=3) == "x-000003"
    assert save_name("x", step=100) == "x-step00000100"


def test_family_detection(tiny_sd1_dir: Path, tiny_sdxl_dir: Path, tmp_path: Path) -> None:
    assert detect_family(tiny_sd1_dir) is family("sd1")
    assert detect_family(tiny_sdxl_dir) is family("sdxl")
    sd2 = tmp_path / "sd2"
    (sd2 / "unet").mkdir(parents=True)
    (sd2 / "unet" / "config.json").write_text(json.dumps({"cross_attention_dim": 1024}))
    assert detect_family(sd2) is family("sd2")
    other = tmp_path / "other"
    (other / "unet").mkdir(parents=True)
    (other / "unet" / "config.json").write_text(json.dumps({"cross_attention_dim": 4096}))
    (other / "model_index.json").write_text(json.dumps({"_class_name": "KandinskyPipeline"}))
    with pytest.raises(ModelLoadError, match="cannot tell the model family.*KandinskyPipeline"):
        detect_family(other)


def test_family_mismatch_is_explained(tiny_sd1_dir: Path) -> None:
    with pytest.raises(ModelLoadError, match="looks like a model of the SD1.x family"):
        load_model(str(tiny_sd1_dir), "sdxl", torch.float32)


def test_missing_model_and_broken_folder_are_explained(tmp_path: Path, tiny_sd1_dir: Path) -> None:
    with pytest.raises(ModelLoadError, match="is neither a local folder nor a hub id"):
        load_model(str(tmp_path / "no-such-model"), "auto", torch.float32)  # a path is never sent to the hub
    broken = tmp_path / "broken"
    shutil.copytree(tiny_sd1_dir, broken)
    (broken / "unet" / "config.json").unlink()
    with pytest.raises(ModelLoadError, match="config.json is missing"):
        load_model(str(broken), "auto", torch.float32)


def test_clip_skip_uses_an_earlier_layer(tiny_sd1_dir: Path) -> None:
    model = load_model(str(tiny_sd1_dir), "auto", torch.float32)
    ids = model.family.tokenize(model.tokenizers, ["sks shape"])
    last, _ = model.family.encode_prompts(model.text_encoders, ids, 1)
    skip2, _ = model.family.encode_prompts(model.text_encoders, ids, 2)
    assert last.shape == skip2.shape and not torch.allclose(last, skip2)
    te = model.text_encoders[0]
    expected = te.final_layer_norm(te(ids[0], output_hidden_states=True).hidden_states[-2])
    assert torch.allclose(skip2, expected)


def test_caches_are_built_before_the_denoiser_takes_device_memory(fake_model_dir: Path, tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Text-encoder outputs and latents are cached while the denoiser is not on the device yet (T5-XXL and FLUX's
    transformer together would not fit a 24 GB card); the denoiser is placed before training starts."""
    from helpers import train

    from trainers.demo import build_dataset
    from trainers.train import session

    order: list[str] = []
    for name in ("_place_encoders", "build_pipeline", "_place_denoiser"):
        real = getattr(session, name)
        monkeypatch.setattr(session, name, lambda *a, _real=real, _name=name, **k: (order.append(_name),
                                                                                    _real(*a, **k))[1])
    assert train("lora", tmp_path / "run", pretrained_model_name_or_path=str(fake_model_dir),
                 train_data_dir=str(build_dataset(tmp_path / "data")), output_dir=str(tmp_path / "out"),
                 resolution="64", max_train_steps=1, max_data_loader_n_workers=0, network_train_unet_only=True,
                 cache_text_encoder_outputs=True, cache_latents=True) == 0
    assert order == ["_place_encoders", "build_pipeline", "_place_denoiser"]


def test_a_bf16_run_on_a_cpu_without_half_kernels_keeps_its_vae_fp32(monkeypatch: pytest.MonkeyPatch,
                                                                      tiny_sd1_dir: Path) -> None:
    """Such a CPU runs bf16 convolutions 100x slower than fp32 (an AVX2-only CI runner caching latents); a GPU, fp32
    runs and a CPU with the kernels keep the VAE in the weight dtype, as sd-scripts does."""
    from trainers.core.options.typed import PrecisionOptions
    from trainers.models import half_kernels
    from trainers.train import session

    cfg = TrainConfig("lora", {"mixed_precision": "bf16"})
    model = load_model(str(tiny_sd1_dir), "auto", torch.bfloat16)
    for has_kernels, expected in ((False, torch.float32), (True, torch.bfloat16)):
        monkeypatch.setattr(half_kernels, "cpu_half_kernels", lambda dtype, has=has_kernels: has)
        session._place_encoders(PrecisionOptions.of(cfg), model, torch.device("cpu"), torch.bfloat16)
        assert next(model.vae.parameters()).dtype == expected
    monkeypatch.setattr(half_kernels, "cpu_half_kernels", lambda dtype: False)
    assert not half_kernels.slow_half_convolutions(torch.device("cuda"), torch.bfloat16)
    assert not half_kernels.slow_half_convolutions(torch.device("cpu"), torch.float32)
