"""Library chatter stays out of the run's log; real warnings do not."""
from __future__ import annotations

import logging

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
