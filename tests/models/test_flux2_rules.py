"""FLUX.2's own noise-level draw and options, without a model: 'flux2_shift' is musubi-tuner's (sigmoid, shifted by
FLUX.1's rule for the tokens FLUX.2's transformer reads), FLUX.2's only, and FLUX.1's 'flux_shift' is refused for it
by name."""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from trainers.models.flux2.rules import FLUX2
from trainers.models.zimage.rules import ZIMAGE


def test_flux2_shift_is_taken_for_flux2_only_and_flux_shift_is_told_apart() -> None:
    assert FLUX2.option_issues({"timestep_sampling": "flux2_shift"}) == []
    assert [i.field for i in ZIMAGE.option_issues({"timestep_sampling": "flux2_shift"})] == ["timestep_sampling"]
    (issue,) = FLUX2.option_issues({"timestep_sampling": "flux_shift"})
    assert issue.field == "timestep_sampling" and "flux2_shift" in issue.message and "FLUX.2" in issue.message


def test_flux2_shift_draws_musubi_tuners_sigmas_for_the_image_size() -> None:
    from trainers.models.flux2.family import FLUX2 as FAMILY

    normal, uniform = torch.tensor([-1.0, 0.0, 0.7]), torch.rand(3)
    family = FAMILY.configured({"timestep_sampling": "flux2_shift", "sigmoid_scale": 1.0})
    sigmas = family.draw_sigmas(normal, uniform, (128, 128), None, None)  # 1024 px: 64 x 64 tokens of 2x2 patches
    shift = math.exp(1.15)  # musubi-tuner: mu linear from 0.5 at 256 to 1.15 at 4096 packed tokens
    t = torch.sigmoid(normal)
    assert torch.allclose(sigmas, t * shift / (1 + (shift - 1) * t))
    smaller = family.draw_sigmas(normal, uniform, (64, 64), None, None)  # 512 px: less shift
    assert (smaller < sigmas).all()


def test_a_processors_chat_template_is_read_and_a_missing_one_is_named(tmp_path: Path) -> None:
    """FLUX.2 dev's tokenizer folder is a processor's: its chat template may sit in chat_template.json, which the
    tokenizer alone does not read."""
    from trainers.models.base import ModelLoadError
    from trainers.models.flux2.family import processor_chat_template

    (tmp_path / "chat_template.json").write_text(json.dumps({"chat_template": "[INST]{{ messages }}[/INST]"}))
    assert processor_chat_template(tmp_path) == "[INST]{{ messages }}[/INST]"
    with pytest.raises(ModelLoadError, match="no chat template"):
        processor_chat_template(tmp_path / "missing")
