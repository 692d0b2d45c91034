"""Flow-matching training math (trainers/train/flow.py) against hand-computed values: each option does what
sd-scripts' flux_train_utils / sd3_train_utils do with it."""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

import pytest
import torch

from trainers.models.flow import FlowSettings
from trainers.train.flow import (
    FlowNoised,
    add_flow_noise,
    density,
    flow_score,
    flux_sigmas,
    loss_weights,
    prediction_and_target,
    sd3_sigmas,
    shifted,
)
from trainers.train.noise import per_sample

NORMAL = torch.tensor([-1.0, 0.0, 0.5, 2.0])
UNIFORM = torch.tensor([0.05, 0.3, 0.5, 0.9])


@dataclass
class Opts:
    seed: int = 7
    loss_type: str = "l2"
    huber_schedule: str = "constant"
    huber_c: float = 0.1
    huber_scale: float = 1.0
    min_timestep: int | None = None
    max_timestep: int | None = None
    ip_noise_gamma: float = 0.0
    ip_noise_gamma_random_strength: bool = False


def sigmoid(x: float) -> float:
    return 1 / (1 + math.exp(-x))


def test_densities_of_the_weighting_schemes() -> None:
    logit = density("logit_normal", NORMAL, UNIFORM, 0.2, 2.0, 1.29)
    assert torch.allclose(logit, torch.tensor([sigmoid(n * 2.0 + 0.2) for n in NORMAL.tolist()]))
    mode = density("mode", NORMAL, UNIFORM, 0.0, 1.0, 1.29)
    by_hand = [1 - u - 1.29 * (math.cos(math.pi * u / 2) ** 2 - 1 + u) for u in UNIFORM.tolist()]
    assert torch.allclose(mode, torch.tensor(by_hand))
    for scheme in ("uniform", "none", "sigma_sqrt", "cosmap"):
        assert torch.equal(density(scheme, NORMAL, UNIFORM, 0.0, 1.0, 1.29), UNIFORM)


def test_the_flow_shift() -> None:
    assert shifted(torch.tensor(0.5), 3.0).item() == pytest.approx(0.75)  # 3 * 0.5 / (1 + 2 * 0.5)
    assert shifted(torch.tensor(0.25), 1.0).item() == pytest.approx(0.25)


def test_each_flux_timestep_sampling() -> None:
    base = FlowSettings()
    assert torch.equal(flux_sigmas(replace(base, timestep_sampling="uniform"), NORMAL, UNIFORM, (64, 64)), UNIFORM)
    sig = flux_sigmas(replace(base, timestep_sampling="sigmoid", sigmoid_scale=2.0), NORMAL, UNIFORM, (64, 64))
    assert torch.allclose(sig, torch.tensor([sigmoid(2 * n) for n in NORMAL.tolist()]))
    shift = flux_sigmas(replace(base, timestep_sampling="shift", discrete_flow_shift=3.1582), NORMAL, UNIFORM, (64, 64))
    by_hand = [3.1582 * sigmoid(n) / (1 + 2.1582 * sigmoid(n)) for n in NORMAL.tolist()]
    assert torch.allclose(shift, torch.tensor(by_hand))
    # flux_shift: 64x64 latents are 32x32 = 1024 tokens; mu = 0.5 + 0.65 * (1024 - 256) / 3840 = 0.63
    resolution = flux_sigmas(replace(base, timestep_sampling="flux_shift"), NORMAL, UNIFORM, (64, 64))
    mu = 0.63
    by_hand = [math.exp(mu) / (math.exp(mu) + 1 / sigmoid(n) - 1) for n in NORMAL.tolist()]
    assert torch.allclose(resolution, torch.tensor(by_hand), atol=1e-6)
    bigger = flux_sigmas(replace(base, timestep_sampling="flux_shift"), NORMAL, UNIFORM, (128, 128))
    assert (bigger > resolution).all()  # larger images train at higher noise
    # sigma: index int(u * 1000) (in float32, as sd-scripts) into the schedule shifted by discrete_flow_shift,
    # noisiest first
    sigma = flux_sigmas(replace(base, discrete_flow_shift=3.0), NORMAL, UNIFORM, (64, 64))
    indices = [int(v) for v in (UNIFORM * 1000).tolist()]
    assert indices == [50, 300, 500, 900]
    by_hand = [3 * t / (1 + 2 * t) for t in ((1000 - i) / 1000 for i in indices)]
    assert torch.allclose(sigma, torch.tensor(by_hand))
    logit = flux_sigmas(replace(base, weighting_scheme="logit_normal"), NORMAL, UNIFORM, (64, 64))
    by_hand = [3 * t / (1 + 2 * t) for t in ((1000 - int(sigmoid(n) * 1000)) / 1000 for n in NORMAL.tolist())]
    assert torch.allclose(logit, torch.tensor(by_hand))


def test_sd3_timesteps_are_whole_and_follow_shift_and_range() -> None:
    base = FlowSettings()
    assert torch.allclose(sd3_sigmas(base, NORMAL, UNIFORM, None, None), torch.tensor([0.05, 0.3, 0.5, 0.9]))
    ranged = sd3_sigmas(base, NORMAL, UNIFORM, 100, 500)  # floor(u * 400 + 100) / 1000
    assert torch.allclose(ranged, torch.tensor([0.12, 0.22, 0.3, 0.46]))
    shift = sd3_sigmas(replace(base, training_shift=3.0), NORMAL, UNIFORM, None, None)
    by_hand = [math.floor(3 * u / (1 + 2 * u) * 1000) / 1000 for u in UNIFORM.tolist()]
    assert torch.allclose(shift, torch.tensor(by_hand))
    logit = sd3_sigmas(replace(base, weighting_scheme="logit_normal"), NORMAL, UNIFORM, None, None)
    assert torch.allclose(logit, torch.tensor([math.floor(sigmoid(n) * 1000) / 1000 for n in NORMAL.tolist()]))


def test_loss_weights_of_the_weighting_schemes() -> None:
    s = torch.tensor([0.25, 0.5, 0.75])
    assert torch.allclose(loss_weights("sigma_sqrt", s), torch.tensor([16.0, 4.0, 16 / 9]))
    cosmap = [2 / (math.pi * (1 - 2 * x + 2 * x * x)) for x in s.tolist()]
    assert torch.allclose(loss_weights("cosmap", s), torch.tensor(cosmap))
    for scheme in ("none", "uniform", "logit_normal", "mode"):
        assert torch.equal(loss_weights(scheme, s), torch.ones(3))


def test_noisy_input_is_the_straight_line_between_latents_and_noise() -> None:
    latents = torch.randn(3, 4, 8, 8)
    keys = torch.tensor([[1, 0], [1, 1], [1, 2]])
    settings = FlowSettings(timestep_sampling="uniform")
    noised = add_flow_noise(latents, keys, settings, Opts(), velocity=True)
    uniform = per_sample(keys, 7, "flow_uniform", lambda g: torch.rand((), generator=g))
    noise = per_sample(keys, 7, "noise", lambda g: torch.randn((4, 8, 8), generator=g))
    assert torch.equal(noised.sigmas, uniform) and torch.allclose(noised.timesteps, uniform * 1000)
    s = uniform.view(-1, 1, 1, 1)
    assert torch.equal(noised.noise, noise)
    assert torch.allclose(noised.noisy, (1 - s) * latents + s * noise)
    # a sample's draws are its own: alone it gets the same noise level and noise
    alone = add_flow_noise(latents[1:2], keys[1:2], settings, Opts(), velocity=True)
    assert torch.allclose(alone.noisy, noised.noisy[1:2]) and torch.equal(alone.sigmas, noised.sigmas[1:2])
    # ip_noise_gamma perturbs the input (scaled by sigma, as sd-scripts), not the target's noise
    perturbed = add_flow_noise(latents, keys, settings, Opts(ip_noise_gamma=0.1), velocity=True)
    xi = per_sample(keys, 7, "ip_noise", lambda g: torch.randn((4, 8, 8), generator=g))
    assert torch.allclose(perturbed.noisy, (1 - s) * latents + s * (noise + 0.1 * xi), atol=1e-6)
    assert torch.equal(perturbed.noise, noise)


def _noised() -> tuple[FlowNoised, torch.Tensor, torch.Tensor]:
    latents, noise, output = torch.randn(2, 4, 4, 4), torch.randn(2, 4, 4, 4), torch.randn(2, 4, 4, 4)
    sigmas = torch.tensor([0.25, 0.8])
    s = sigmas.view(-1, 1, 1, 1)
    return FlowNoised(noise, (1 - s) * latents + s * noise, sigmas, sigmas * 1000), latents, output


def test_flux_model_prediction_types_and_sd3_preconditioning() -> None:
    noised, latents, output = _noised()
    s = noised.sigmas.view(-1, 1, 1, 1)
    velocity = noised.noise - latents
    pred, target, weights = prediction_and_target(output, noised, latents, FlowSettings(model_prediction_type="raw"),
                                                  True)
    assert torch.equal(pred, output) and torch.equal(target, velocity) and weights is None
    pred, _, weights = prediction_and_target(output, noised, latents, FlowSettings(model_prediction_type="additive"),
                                             True)
    assert torch.allclose(pred, output + noised.noisy) and weights is None
    scaled = FlowSettings(model_prediction_type="sigma_scaled", weighting_scheme="sigma_sqrt")
    pred, target, weights = prediction_and_target(output, noised, latents, scaled, True)
    assert torch.allclose(pred, noised.noisy - s * output) and torch.equal(target, velocity)
    assert torch.allclose(weights, torch.tensor([16.0, 1 / 0.64]))
    # SD3: the latents estimate against the latents; a perfect velocity gives the latents back exactly
    pred, target, weights = prediction_and_target(velocity, noised, latents, FlowSettings(), False)
    assert torch.allclose(pred, latents, atol=1e-6) and torch.equal(target, latents)
    assert torch.equal(weights, torch.ones(2))


def test_score_weights_each_sample_then_masks_then_averages() -> None:
    pred, target = torch.zeros(2, 1, 2, 2), torch.ones(2, 1, 2, 2)
    target[1] = 2.0
    plain = flow_score(pred, target, None, torch.tensor([100.0, 900.0]), Opts())
    assert plain.item() == pytest.approx((1 + 4) / 2)
    weighted = flow_score(pred, target, torch.tensor([2.0, 0.5]), torch.tensor([100.0, 900.0]), Opts())
    assert weighted.item() == pytest.approx((2 * 1 + 0.5 * 4) / 2)
    masks = torch.tensor([[[[1.0, 0.0], [0.0, 0.0]]], [[[1.0, 1.0], [1.0, 1.0]]]])
    masked = flow_score(pred, target, None, torch.tensor([100.0, 900.0]), Opts(), masks, torch.tensor([1.0, 0.0]))
    assert masked.item() == pytest.approx((0.25 * 1 + 0) / 2)
    huber = flow_score(pred, target, None, torch.tensor([0.0, 1000.0]), Opts(loss_type="huber",
                                                                             huber_schedule="exponential"))
    c0, c1 = 1.0, 0.1  # huber_c^(t/1000): 1 at t=0, huber_c at t=1000
    by_hand = [2 * c0 * (math.sqrt(1 + c0 ** 2) - c0), 2 * c1 * (math.sqrt(4 + c1 ** 2) - c1)]
    assert huber.item() == pytest.approx(sum(by_hand) / 2, rel=1e-5)
