"""The noise-level samplers of Qwen-Image ('qwen_shift', musubi-tuner's) and Lumina 2 ('nextdit_shift', sd-scripts'):
their draws as those tools compute them, and each refused by name for the other families."""
from __future__ import annotations

import math

import pytest
import torch

from trainers.core.options import BY_NAME
from trainers.models.families import family
from trainers.models.rules import all_rules, named


def _draw(name: str, sampling: str, normal: torch.Tensor, uniform: torch.Tensor, size: tuple[int, int]
          ) -> torch.Tensor:
    configured = family(name).configured({"timestep_sampling": sampling, "sigmoid_scale": 1.0})
    return configured.draw_sigmas(normal, uniform, size, None, None)


def test_qwen_shift_is_musubis_resolution_shift() -> None:
    normal, uniform = torch.tensor([-1.0, 0.0, 2.0]), torch.rand(3)
    latents = (166, 166)  # 1328 x 1328 pixels: musubi's guide says a shift of about 2.2
    shift = math.exp(0.5 + (0.9 - 0.5) / (8192 - 256) * (83 * 83 - 256))  # get_lin_function(256, 0.5, 8192, 0.9)
    t = torch.sigmoid(normal)
    assert torch.allclose(_draw("qwen_image", "qwen_shift", normal, uniform, latents), t * shift / (1 + (shift - 1) * t))
    assert 2.2 < shift < 2.4



def test_qwen_image21_shifts_as_its_pipeline_over_unpatched_tokens() -> None:
    normal, uniform = torch.tensor([-1.0, 0.0, 2.0]), torch.rand(3)
    shift = math.exp(0.5 + (1.15 - 0.5) / (4096 - 256) * (64 * 64 - 256))  # 1024 px: 64 x 64 latents, one token each
    t = torch.sigmoid(normal)
    assert torch.allclose(_draw("qwen_image21", "qwen_shift", normal, uniform, (64, 64)),
                          t * shift / (1 + (shift - 1) * t))

def test_nextdit_shift_is_sd_scripts_uniform_draw_shifted_by_the_size() -> None:
    normal, uniform = torch.randn(3), torch.tensor([0.1, 0.5, 0.9])
    mu = 0.5 + (1.15 - 0.5) / (4096 - 256) * (64 * 64 - 256)  # 1024 px: 128 x 128 latents, 4096 packed tokens
    expected = math.exp(mu) / (math.exp(mu) + (1 / uniform - 1))  # lumina_train_util.time_shift(mu, 1.0, t)
    assert torch.allclose(_draw("lumina2", "nextdit_shift", normal, uniform, (128, 128)), expected)


@pytest.mark.parametrize("name, sampling", [("flux", "qwen_shift"), ("lumina2", "qwen_shift"),
                                            ("qwen_image", "nextdit_shift"), ("chroma", "nextdit_shift")])
def test_a_family_sampler_is_refused_for_the_others(name: str, sampling: str) -> None:
    rules = named(name, all_rules())
    values = {**{n: o.default for n, o in BY_NAME.items()}, "timestep_sampling": sampling}
    (issue,) = [i for i in rules.option_issues(values) if i.field == "timestep_sampling"]
    assert repr(sampling) in issue.message and rules.title in issue.message
