"""Krea 2's own noise-level draw without a model: 'krea2_shift' (musubi-tuner's) shifts by the image's size as
Krea2Pipeline samples a base model, and is Krea 2's only."""
from __future__ import annotations

import math

import torch

from trainers.models.krea2.rules import KREA2
from trainers.models.qwen_image.rules import QWEN_IMAGE


def test_krea2_shift_draws_the_pipelines_shift_for_krea2_only() -> None:
    from trainers.models.krea2.family import KREA2 as FAMILY

    assert KREA2.option_issues({"timestep_sampling": "krea2_shift"}) == []
    assert [i.field for i in QWEN_IMAGE.option_issues({"timestep_sampling": "krea2_shift"})] == ["timestep_sampling"]
    normal = torch.tensor([-1.0, 0.0, 0.7])
    family = FAMILY.configured({"timestep_sampling": "krea2_shift", "sigmoid_scale": 1.0})
    sigmas = family.draw_sigmas(normal, torch.rand(3), (160, 160), None, None)  # 1280 px: 80 x 80 = 6400 tokens
    shift, t = math.exp(1.15), torch.sigmoid(normal)  # mu linear from 0.5 at 256 to 1.15 at 6400 tokens
    assert torch.allclose(sigmas, t * shift / (1 + (shift - 1) * t))
