"""Shared pytest fixtures."""
from __future__ import annotations

from pathlib import Path

import pytest

from trainers.demo import ensure_demo
from trainers.models.flux.tiny import build_tiny_flux
from trainers.models.sd.tiny import build_tiny_sd1
from trainers.models.sd3.tiny import build_tiny_sd3
from trainers.models.sdxl.tiny import build_tiny_sdxl


@pytest.fixture(scope="session")
def built_demo() -> Path:
    """The repo's demo/ (what `app.py --demo` builds: its model from the shipped weights, in seconds)."""
    demo = Path(__file__).resolve().parents[1] / "demo"
    for line in ensure_demo(demo):
        print(f"demo {line}", flush=True)
    return demo


@pytest.fixture(scope="session")
def tiny_sd1_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random-init SD1.x diffusers pipeline folder, built once per test session."""
    return build_tiny_sd1(tmp_path_factory.mktemp("tiny_sd1"))


@pytest.fixture(scope="session")
def tiny_sdxl_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random-init SDXL diffusers pipeline folder, built once per test session."""
    return build_tiny_sdxl(tmp_path_factory.mktemp("tiny_sdxl"))


@pytest.fixture(scope="session")
def tiny_sd3_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random-init SD3.5-medium-like diffusers pipeline folder (CLIP-L, CLIP-G, T5), built once."""
    return build_tiny_sd3(tmp_path_factory.mktemp("tiny_sd3"))


@pytest.fixture(scope="session")
def tiny_flux_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random-init FLUX.1-dev-like diffusers pipeline folder (CLIP-L, T5), built once."""
    return build_tiny_flux(tmp_path_factory.mktemp("tiny_flux"))


@pytest.fixture(autouse=True, scope="module")
def _denormals_back_on():
    """Training or generating in this process turns on flush-to-zero for denormals (see session.py);
    the next test file (hypothesis' float strategies among them) gets the default IEEE behaviour back."""
    yield
    import torch

    torch.set_flush_denormal(False)
