"""Loss, noise and timestep options against sd-scripts' formulas, per-sample seeding, their checks, a run."""
from __future__ import annotations

import math
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F
from safetensors.torch import load_file

from trainers.core.errors import ConfigError
from trainers.core.options import TrainConfig, load_config
from trainers.core.options.loss_checks import loss_issues
from trainers.data.dataset import sample_generator
from trainers.models import family
from trainers.train.diffusion import NoiseOptions, add_training_noise, diffusion_loss, score
from trainers.train.losses import min_snr_weights, snr, zero_terminal_snr_scheduler

from helpers import events, train

KEYS = torch.tensor([[0, 3], [1, 5]])  # (epoch, index) of two samples
SEED = 7


def scheduler(**extra: object):
    from diffusers import DDPMScheduler

    return DDPMScheduler(beta_schedule="scaled_linear", beta_start=0.00085, beta_end=0.012, clip_sample=False,
                         **extra)


def opts(**changes: object) -> NoiseOptions:
    base = {"seed": SEED, "noise_offset": 0.0, "min_snr_gamma": None, "prediction_type": "epsilon"}
    return NoiseOptions(**{**base, **changes})


def gen(index: int, stream: str) -> torch.Generator:
    epoch, sample = KEYS[index].tolist()
    return sample_generator(SEED, epoch, sample, stream)


# --- the loss types, by hand ------------------------------------------------------------------------------

PRED = torch.tensor([[[[0.5, -1.0], [2.0, 0.0]]], [[[3.0, 0.25], [-0.5, 1.5]]]])  # (2, 1, 2, 2)
TARGET = torch.tensor([[[[0.0, 0.0], [1.0, 1.0]]], [[[0.0, 1.0], [0.0, -1.0]]]])
T = torch.tensor([100, 900])


def by_hand(loss_type: str, thresholds: list[float]) -> float:
    per_sample = []
    for b, c in enumerate(thresholds):
        terms = []
        for d in (PRED[b] - TARGET[b]).flatten().tolist():
            if loss_type == "l2":
                terms.append(d * d)
            elif loss_type == "l1":
                terms.append(abs(d))
            else:
                smooth = math.sqrt(d * d + c * c) - c
                terms.append(2 * c * smooth if loss_type == "huber" else 2 * smooth)
        per_sample.append(sum(terms) / len(terms))
    return sum(per_sample) / len(per_sample)


def huber_c_by_hand(sched, schedule: str, c: float, scale: float) -> list[float]:
    out = []
    for t in T.tolist():
        if schedule == "constant":
            out.append(c * scale)
        elif schedule == "exponential":
            out.append(scale * c ** (t / 1000))  # exp(-(-ln c / T) * t)
        else:
            alpha = float(sched.alphas_cumprod[t])
            sigma = math.sqrt((1 - alpha) / alpha)
            out.append((1 - c) / (1 + sigma) ** 2 + c)
    return out


@pytest.mark.parametrize("loss_type", ["l2", "l1"])
def test_plain_losses_equal_a_hand_computation(loss_type: str) -> None:
    got = score(PRED, TARGET, T, scheduler(), opts(loss_type=loss_type))
    assert float(got) == pytest.approx(by_hand(loss_type, [0, 0]), rel=1e-6)


@pytest.mark.parametrize("schedule", ["constant", "exponential", "snr"])
@pytest.mark.parametrize("loss_type", ["huber", "smooth_l1"])
def test_huber_losses_and_schedules_equal_a_hand_computation(loss_type: str, schedule: str) -> None:
    sched = scheduler()
    o = opts(loss_type=loss_type, huber_schedule=schedule, huber_c=0.3, huber_scale=2.0)
    thresholds = huber_c_by_hand(sched, schedule, 0.3, 2.0)
    assert float(score(PRED, TARGET, T, sched, o)) == pytest.approx(by_hand(loss_type, thresholds), rel=1e-5)
    if schedule != "constant":
        assert thresholds[0] != pytest.approx(thresholds[1])  # the threshold really follows the timestep


def test_snr_weightings_follow_sd_scripts() -> None:
    sched = scheduler()
    ratio = (sched.alphas_cumprod / (1 - sched.alphas_cumprod))[T]
    base = F.mse_loss(PRED, TARGET, reduction="none").mean(dim=(1, 2, 3))
    capped = torch.clamp(ratio, max=1000)
    cases = {
        ("epsilon", "debiased_estimation_loss", True): base / torch.sqrt(capped),
        ("v_prediction", "debiased_estimation_loss", True): base / (capped + 1),
        ("v_prediction", "scale_v_pred_loss_like_noise_pred", True): base * capped / (capped + 1),
        ("epsilon", "v_pred_like_loss", 0.5): base + base / (capped / (capped + 1)) * 0.5,
        ("epsilon", "min_snr_gamma", 5.0): base * torch.clamp(ratio, max=5) / ratio,
    }
    for (prediction, name, value), expected in cases.items():
        got = score(PRED, TARGET, T, sched, opts(prediction_type=prediction, **{name: value}))
        assert float(got) == pytest.approx(float(expected.mean()), rel=1e-5), name


def test_sample_weights_scale_each_sample() -> None:
    plain = score(PRED, TARGET, T, scheduler(), opts(), loss_weights=torch.tensor([1.0, 0.0]))
    first = F.mse_loss(PRED[:1], TARGET[:1])
    assert float(plain) == pytest.approx(float(first) / 2)


# --- timesteps and noise, seeded per sample ---------------------------------------------------------------

LATENTS = torch.randn(2, 4, 8, 8, generator=torch.Generator().manual_seed(0))


def noised(**changes: object):
    return add_training_noise(LATENTS, KEYS, scheduler(), opts(**changes))


def test_min_and_max_timestep_limit_the_drawn_timesteps() -> None:
    keys = torch.tensor([[0, i] for i in range(200)])
    latents = torch.zeros(200, 4, 2, 2)
    drawn = add_training_noise(latents, keys, scheduler(), opts(min_timestep=300, max_timestep=320)).timesteps
    assert drawn.min() >= 300 and drawn.max() < 320 and len(set(drawn.tolist())) > 10
    assert set(add_training_noise(latents, keys, scheduler(), opts(min_timestep=950)).timesteps.tolist()) <= set(
        range(950, 1000))
    fixed = add_training_noise(latents, keys, scheduler(), opts(min_timestep=400, max_timestep=400)).timesteps
    assert set(fixed.tolist()) == {400}  # sd-scripts: equal bounds train at that one timestep
    default = add_training_noise(latents, keys, scheduler(), opts()).timesteps
    assert default.min() < 100 and default.max() > 900


def base_noise(index: int) -> torch.Tensor:
    return torch.randn(4, 8, 8, generator=gen(index, "noise"))


def test_noise_offset_adds_a_per_channel_offset() -> None:
    plain, offset = noised().noise, noised(noise_offset=0.1).noise
    for b in range(2):
        expected = 0.1 * torch.randn(4, 1, 1, generator=gen(b, "offset"))
        assert torch.allclose(offset[b] - plain[b], expected.expand(4, 8, 8), atol=1e-6)
        assert torch.equal(plain[b], base_noise(b))


def test_noise_offset_random_strength_and_adaptive_scale() -> None:
    plain = noised().noise
    random = noised(noise_offset=0.1, noise_offset_random_strength=True).noise
    adaptive = noised(noise_offset=0.1, adaptive_noise_scale=-0.05).noise
    for b in range(2):
        direction = torch.randn(4, 1, 1, generator=gen(b, "offset"))
        strength = 0.1 * torch.rand((), generator=gen(b, "offset_strength"))
        assert torch.allclose(random[b] - plain[b], (strength * direction).expand(4, 8, 8), atol=1e-6)
        per_channel = torch.clamp(0.1 - 0.05 * LATENTS[b].mean(dim=(1, 2), keepdim=True).abs(), min=0)
        assert torch.allclose(adaptive[b] - plain[b], (per_channel * direction).expand(4, 8, 8), atol=1e-6)


def sd_scripts_pyramid(noise: torch.Tensor, g: torch.Generator, iterations: int, discount: float) -> torch.Tensor:
    """library/custom_train_functions.py pyramid_noise_like for one sample (`random.random()` drawn from `g`)."""
    b, c, w, h = noise.shape
    u = torch.nn.Upsample(size=(w, h), mode="bilinear")
    noise = noise.clone()
    for i in range(iterations):
        r = float(torch.rand((), generator=g)) * 2 + 2
        wn, hn = max(1, int(w / (r**i))), max(1, int(h / (r**i)))
        noise += u(torch.randn(b, c, wn, hn, generator=g)) * discount**i
        if wn == 1 or hn == 1:
            break
    return noise / noise.std()


def test_multires_noise_is_sd_scripts_pyramid_noise_per_sample() -> None:
    got = noised(multires_noise_iterations=6, multires_noise_discount=0.3).noise
    for b in range(2):
        expected = sd_scripts_pyramid(base_noise(b)[None], gen(b, "multires"), 6, 0.3)[0]
        assert torch.allclose(got[b], expected, atol=1e-5)
        assert got[b].std() == pytest.approx(1.0, abs=1e-5)


def test_ip_noise_gamma_perturbs_the_input_but_not_the_target() -> None:
    plain, perturbed = noised(), noised(ip_noise_gamma=0.1)
    randomised = noised(ip_noise_gamma=0.1, ip_noise_gamma_random_strength=True)
    assert torch.equal(plain.noise, perturbed.noise) and torch.equal(plain.timesteps, perturbed.timesteps)
    sched = scheduler()
    for b in range(2):
        extra = torch.randn(4, 8, 8, generator=gen(b, "ip_noise"))
        t = plain.timesteps[b:b + 1]
        expected = sched.add_noise(LATENTS[b:b + 1], plain.noise[b:b + 1] + 0.1 * extra, t)
        assert torch.allclose(perturbed.noisy[b:b + 1], expected, atol=1e-6)
        strength = 0.1 * torch.rand((), generator=gen(b, "ip_strength"))
        expected = sched.add_noise(LATENTS[b:b + 1], plain.noise[b:b + 1] + strength * extra, t)
        assert torch.allclose(randomised.noisy[b:b + 1], expected, atol=1e-6)


EVERYTHING = dict(noise_offset=0.1, noise_offset_random_strength=True, adaptive_noise_scale=0.02,
                  multires_noise_iterations=4, ip_noise_gamma=0.1, ip_noise_gamma_random_strength=True,
                  min_timestep=10, max_timestep=900)


def test_every_draw_is_the_same_whatever_the_batch_split() -> None:
    o = opts(**EVERYTHING)
    together = add_training_noise(LATENTS, KEYS, scheduler(), o)
    for b in range(2):
        alone = add_training_noise(LATENTS[b:b + 1], KEYS[b:b + 1], scheduler(), o)
        for name in ("noise", "noisy", "timesteps"):
            assert torch.allclose(getattr(alone, name)[0], getattr(together, name)[b], atol=1e-6), name


def test_zero_terminal_snr_ends_in_pure_noise_and_samples_follow() -> None:
    from trainers.sampling.pipeline import SAMPLERS, build_scheduler

    original = scheduler()
    rescaled = zero_terminal_snr_scheduler(original)
    assert float(rescaled.alphas_cumprod[-1]) == pytest.approx(0.0, abs=1e-12)
    assert float(rescaled.alphas_cumprod[0]) == pytest.approx(float(original.alphas_cumprod[0]), rel=1e-6)
    # sd-scripts' fix_noise_scheduler_betas_for_zero_terminal_snr, step by step
    root = original.alphas_cumprod.sqrt()
    root = (root - root[-1]) * root[0] / (root[0] - root[-1])
    assert torch.allclose(rescaled.alphas_cumprod, root**2, atol=1e-6)
    model = SimpleNamespace(noise_scheduler=rescaled, prediction_type="v_prediction", family=family("sd2"))
    for sampler in SAMPLERS:
        assert build_scheduler(model, sampler).config.rescale_betas_zero_snr, sampler
    # as in sd-scripts, the SNR weightings keep the original schedule's (finite) SNR
    last = torch.tensor([999])
    assert torch.allclose(snr(rescaled, last), snr(original, last))
    assert torch.isfinite(min_snr_weights(rescaled, last, 5.0, "epsilon")).all()


# --- masks ------------------------------------------------------------------------------------------------

def test_masked_elements_do_not_count() -> None:
    masks = torch.zeros(2, 1, 16, 16)
    masks[:, :, :8] = 1.0  # the top half of the image (the top row of latents at 2x2)
    changed = PRED.clone()
    changed[:, :, 1] += 5.0  # only where the mask is 0
    sched = scheduler()
    for loss_type in ("l2", "huber"):
        o = opts(loss_type=loss_type)
        assert torch.equal(score(PRED, TARGET, T, sched, o, masks), score(changed, TARGET, T, sched, o, masks))
        assert not torch.equal(score(PRED, TARGET, T, sched, o), score(changed, TARGET, T, sched, o))
    half = masks.clone()
    half[:, :, :8, 8:] = 0.5  # area-averaged: a latent's weight is the mean of its pixels' mask
    weights = torch.tensor([[1.0, 0.5], [0.0, 0.0]])
    expected = (F.mse_loss(PRED, TARGET, reduction="none") * weights).mean()
    assert float(score(PRED, TARGET, T, sched, opts(), half)) == pytest.approx(float(expected))


class PerPixel(torch.nn.Module):
    """A stand-in for the UNet that looks at each latent pixel alone (a 1x1 convolution)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(4, 4, 1)

    def forward(self, noisy, timesteps, input_ids, sizes, embeds=None):
        return self.conv(noisy)


@torch.no_grad()
def test_latents_outside_the_mask_do_not_change_the_loss() -> None:
    torch.manual_seed(0)
    predictor = PerPixel()
    model = SimpleNamespace(unet=predictor, vae=SimpleNamespace(config=SimpleNamespace(scaling_factor=0.18)),
                            noise_scheduler=scheduler(), family=family("sd1"))
    mean = torch.randn(2, 4, 4, 4)
    masks = torch.ones(2, 1, 4, 4)
    masks[:, :, :, :2] = 0.0  # the left half of every latent is ignored
    batch = {"latent_mean": mean, "latent_std": torch.full_like(mean, 0.1), "keys": KEYS, "masks": masks,
             "original_size": torch.zeros(2, 2), "crop_top_left": torch.zeros(2, 2), "target_size": torch.zeros(2, 2),
             "loss_weights": torch.ones(2)}
    o = opts(loss_type="smooth_l1", noise_offset=0.05, ip_noise_gamma=0.1)
    before = diffusion_loss(predictor, model, batch, o, torch.float32)
    edited = dict(batch, latent_mean=mean.clone())
    edited["latent_mean"][:, :, :, :2] += 3.0  # another picture where the mask is 0
    assert float(diffusion_loss(predictor, model, edited, o, torch.float32)) == pytest.approx(float(before), rel=1e-6)
    edited["latent_mean"][:, :, :, 3] += 3.0  # and where it is 1
    assert float(diffusion_loss(predictor, model, edited, o, torch.float32)) != pytest.approx(float(before), rel=1e-6)


# --- checks -----------------------------------------------------------------------------------------------

BAD = [
    ({"huber_c": 0.2}, "huber_c", "loss_type 'huber' or 'smooth_l1'"),
    ({"loss_type": "huber", "huber_c": 0.0}, "huber_c", "above 0"),
    ({"loss_type": "huber", "huber_scale": 2.0}, "huber_scale", "'constant' or 'exponential'"),
    ({"min_timestep": 500, "max_timestep": 100}, "min_timestep", "swap them"),
    ({"min_timestep": 999, "max_timestep": 1000}, None, None),
    ({"noise_offset_type": "Multires"}, "multires_noise_iterations", "6-10"),
    ({"multires_noise_iterations": 6}, "multires_noise_iterations", "noise_offset_type = 'Multires'"),
    ({"multires_noise_discount": 0.5}, "multires_noise_discount", "noise_offset_type = 'Multires'"),
    ({"noise_offset_type": "Multires", "multires_noise_iterations": 6, "noise_offset": 0.05}, None, None),
    ({"adaptive_noise_scale": 0.01}, "adaptive_noise_scale", "set noise_offset"),
    ({"noise_offset_random_strength": True}, "noise_offset_random_strength", "set noise_offset"),
    ({"ip_noise_gamma_random_strength": True}, "ip_noise_gamma_random_strength", "set ip_noise_gamma"),
    ({"scale_v_pred_loss_like_noise_pred": True}, "scale_v_pred_loss_like_noise_pred", "v_parameterization = true"),
    ({"v_pred_like_loss": 0.2, "v_parameterization": True}, "v_pred_like_loss", "v_pred_like_loss = 0"),
    ({"masked_loss": True}, "masked_loss", "conditioning_data_dir"),
    ({"masked_loss": True, "alpha_mask": True}, None, None),
    ({"conditioning_data_dir": "/m", "train_data_dir": "/d"}, "conditioning_data_dir", "masked_loss = true"),
    ({"conditioning_data_dir": "/m", "masked_loss": True}, "conditioning_data_dir", "train_data_dir"),
    ({"conditioning_data_dir": "/m", "masked_loss": True, "dataset_config": "d.toml"}, "conditioning_data_dir",
     "dataset_config"),
    ({"conditioning_data_dir": "/m", "masked_loss": True, "train_data_dir": "/d", "alpha_mask": True}, "alpha_mask",
     "two sources"),
]


@pytest.mark.parametrize("values, field, fragment", BAD)
def test_bad_combinations_name_the_option_and_the_fix(values: dict, field: str | None, fragment: str | None) -> None:
    issues = loss_issues(TrainConfig("lora", values))
    if field is None:
        assert issues == []
        return
    assert field in [i.field for i in issues], issues
    issue = next(i for i in issues if i.field == field)
    assert fragment in issue.message and issue.group == "loss"


def test_default_loss_options_are_fine_and_sd_scripts_names_load() -> None:
    assert loss_issues(TrainConfig("lora", {})) == []
    cfg = load_config("lora", overrides=["loss_type='smooth_l1'", "huber_schedule='exponential'", "huber_c=0.2",
                                         "min_timestep=100", "max_timestep=900", "zero_terminal_snr=true",
                                         "debiased_estimation_loss=true", "ip_noise_gamma=0.1"])
    assert (cfg.loss_type, cfg.huber_schedule, cfg.max_timestep) == ("smooth_l1", "exponential", 900)
    assert loss_issues(cfg) == []


def test_v_prediction_only_options_are_checked_against_the_model_too() -> None:
    with pytest.raises(ConfigError, match="scale_v_pred_loss_like_noise_pred"):
        opts(scale_v_pred_loss_like_noise_pred=True)
    with pytest.raises(ConfigError, match="v_pred_like_loss"):
        opts(prediction_type="v_prediction", v_pred_like_loss=0.1)
    cfg = TrainConfig("lora", {"noise_offset_type": "Original", "multires_noise_iterations": 5, "noise_offset": 0.1})
    assert NoiseOptions.from_config(cfg, "epsilon").multires_noise_iterations == 0  # only with 'Multires'
    assert NoiseOptions.from_config(cfg.replace(noise_offset_type="Multires"), "epsilon").multires_noise_iterations == 5


# --- a short run ------------------------------------------------------------------------------------------

@pytest.mark.slow
def test_a_run_with_the_new_options_trains_the_lora(fake_model_dir: Path, tmp_path: Path) -> None:
    from PIL import Image

    from trainers.demo import build_dataset

    data = build_dataset(tmp_path / "data", folder="1_sks shape", size=64)
    for image in (data / "1_sks shape").glob("*.png"):  # the masks: the middle of each image
        mask = Image.new("L", Image.open(image).size, 0)
        mask.paste(255, (16, 16, 48, 48))
        (tmp_path / "masks" / "1_sks shape").mkdir(parents=True, exist_ok=True)
        mask.save(tmp_path / "masks" / "1_sks shape" / image.name)
    out, run_dir = tmp_path / "out", tmp_path / "run"
    code = train("lora", run_dir, pretrained_model_name_or_path=str(fake_model_dir), train_data_dir=str(data),
                 output_dir=str(out), output_name="lossy", max_train_steps=3, resolution="64", train_batch_size=2,
                 max_data_loader_n_workers=0, learning_rate=1e-3, network_dim=4, network_alpha=2,
                 loss_type="huber", huber_schedule="exponential", min_timestep=100, max_timestep=900,
                 noise_offset=0.05, noise_offset_random_strength=True, adaptive_noise_scale=0.01,
                 ip_noise_gamma=0.1, debiased_estimation_loss=True, zero_terminal_snr=True, masked_loss=True,
                 conditioning_data_dir=str(tmp_path / "masks"), cache_latents=True)
    assert code == 0, [e for e in events(run_dir) if e["type"] == "error"]
    losses = [e["loss"] for e in events(run_dir) if e["type"] == "progress"]
    assert len(losses) == 3 and all(math.isfinite(x) for x in losses)
    weights = load_file(out / "lossy.safetensors")
    ups = [t for k, t in weights.items() if k.endswith("lora_up.weight")]
    assert ups and any(t.abs().max() > 0 for t in ups)  # lora_up starts at zero: training moved it
