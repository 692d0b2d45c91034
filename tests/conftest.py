"""Shared pytest fixtures."""
from __future__ import annotations

import os

# One torch thread per test process (the trainers and jobs a test starts inherit it): the tiny models are too small
# for more to pay, and on a shared or busy CPU, or beside pytest-xdist's other worker, extra threads mostly wait on
# each other (a tiny UNet's training step measured 6x slower with 2 threads than with 1 on a loaded 2-core machine).
os.environ.setdefault("OMP_NUM_THREADS", "1")

from collections.abc import Iterator  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402
from filelock import FileLock  # noqa: E402

from browser_app import browser, demo_app, page, shots  # noqa: F401 - fixtures of every browser module
from process_guard import install, pytest_runtest_protocol, pytest_runtest_teardown  # noqa: F401 - hooks
from trainers.demo import ensure_demo
from trainers.models.flux.tiny import build_tiny_flux
from trainers.models.sd.tiny import build_tiny_sd1
from trainers.models.sd3.tiny import build_tiny_sd3
from trainers.models.sdxl.tiny import build_tiny_sdxl


pytest_plugins = ("pytester",)  # tests/test_process_guard.py runs a throwaway test file

install()
torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The `long` tests first, so that pytest-xdist's workers do not end on one of them while the other waits (the
    demo's run alone is minutes). Under pytest-xdist (--dist loadgroup) the browser tests run in one worker, in
    order, on one shared app."""
    items.sort(key=lambda item: item.get_closest_marker("long") is None)  # stable: the rest keep their order
    if not config.pluginmanager.hasplugin("xdist"):
        return
    for item in items:
        if item.get_closest_marker("browser"):
            item.add_marker(pytest.mark.xdist_group("browser"))


@pytest.fixture(scope="session")
def built_demo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The repo's demo/ (what `app.py --demo` builds: its model from the shipped weights, in seconds). Built under a
    lock in the folder every pytest-xdist worker's temporary folder sits in: one worker builds, the others wait."""
    demo = Path(__file__).resolve().parents[1] / "demo"
    with FileLock(str(tmp_path_factory.getbasetemp().parent / "built_demo.lock")):
        for line in ensure_demo(demo):
            print(f"demo {line}", flush=True)
    return demo


@pytest.fixture(scope="session")
def _fake_model_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tests.fake_family.family import build_fake_model

    return build_fake_model(tmp_path_factory.mktemp("fake_model"))


@pytest.fixture()
def fake_model_dir(_fake_model_folder: Path) -> Iterator[Path]:
    """A model folder of the tests' fake family (tests/fake_family/: a few-thousand-parameter denoiser behind the
    real family interface), for tests whose behaviour does not depend on the model; the family is registered in
    this process for the test. A trainer process finds it with `fake_family_env()` (tests/helpers.py)."""
    from tests.fake_family import registered

    with registered():
        yield _fake_model_folder


@pytest.fixture(scope="module")
def module_fake_model_dir(_fake_model_folder: Path) -> Iterator[Path]:
    """fake_model_dir for a module-scoped fixture (a run several tests read): the family is registered in this
    process until the module's last test ends."""
    from tests.fake_family import registered

    with registered():
        yield _fake_model_folder


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
