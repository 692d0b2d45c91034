"""Library chatter stays out of the run's log; real warnings do not; what training never uses is not imported."""
from __future__ import annotations

import logging
from pathlib import Path

import pytest


def test_known_chatter_is_dropped_and_other_warnings_kept(capfd: pytest.CaptureFixture[str],
                                                           caplog: pytest.LogCaptureFixture) -> None:
    from trainers.train.quiet import quiet_libraries

    quiet_libraries()
    logging.getLogger("bitsandbytes.backends.cpu.ops").warning(
        "Failed to load CPU gemm_4bit_forward from kernels-community: No module named 'kernels'.")
    logging.getLogger("transformers.utils.import_utils").warning(
        "`CLIPImageProcessor` requires torchvision (not installed); falling back to `CLIPImageProcessorPil`")
    logging.getLogger("diffusers.models.modeling_utils").warning(
        "There are modules in AutoencoderKL that should be kept in float32: []. Casting directly ...")
    logging.getLogger("diffusers.models.modeling_utils").warning("a real problem with the weights")
    logging.getLogger("bitsandbytes.cextension").warning("another real problem")
    err = capfd.readouterr().err + caplog.text  # libraries' own handlers, and the root's (pytest's here)
    assert "gemm_4bit" not in err and "torchvision" not in err and "float32: []" not in err
    assert "a real problem with the weights" in err and "another real problem" in err


@pytest.mark.slow
def test_a_run_imports_its_libraries_without_bitsandbytes_until_an_8bit_optimizer_asks() -> None:
    """bitsandbytes' import compiles kernels with torch.compile (~1 s before the first step); the model libraries
    import it for quantized models the trainers never load. A fresh interpreter, as a run starts."""
    import subprocess
    import sys

    script = """
import sys
from trainers.train.quiet import quiet_libraries
quiet_libraries()
from diffusers import AutoencoderKL, UNet2DConditionModel
from transformers import CLIPTextModel
print("after the libraries:", "bitsandbytes" in sys.modules, "torch._inductor.compile_fx" in sys.modules)
from trainers.core.options import load_config
from trainers.train.optim import optimizer_class
print("8-bit optimizer:", optimizer_class(load_config("lora", overrides=["optimizer_type='AdamW8bit'"])).__name__)
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "after the libraries: False False" in done.stdout
    assert "8-bit optimizer: AdamW8bit" in done.stdout


def test_held_off_packages_look_missing_inside_and_come_back_after(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util
    import sys

    from trainers.train.quiet import held_off

    (tmp_path / "atelier_probe_pkg.py").write_text("VALUE = 1\n", encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    with held_off("json"):  # imported long ago: left alone
        import json  # noqa: F401
    with held_off("atelier_probe_pkg"):
        assert importlib.util.find_spec("atelier_probe_pkg") is None
        with pytest.raises(ImportError):
            import atelier_probe_pkg  # noqa: F401
    import atelier_probe_pkg  # noqa: F811

    assert atelier_probe_pkg.VALUE == 1
    monkeypatch.delitem(sys.modules, "atelier_probe_pkg")
