"""Quantized frozen base weights end to end on the tiny SD1 model: each mode this CPU can run trains a LoRA 5 steps
with the unquantized run's losses (within 1%), and its LoRA loads on the unquantized model in diffusers."""
from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from helpers import events, fixed_seed_image, run_trainer, sets, train

from trainers.demo import build_dataset
from trainers.methods.lora.file_format import read_lora_file

pytestmark = pytest.mark.slow  # every test here runs a trainer

SMALL = {"resolution": "64", "train_batch_size": 1, "max_data_loader_n_workers": 0, "learning_rate": 1e-2,
         "network_dim": 4, "network_alpha": 4, "max_train_steps": 5, "save_precision": "float"}
LOSS_TOLERANCE = 0.01  # each step's loss within 1% of the unquantized run's (docs/memory.md gives what was measured)


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_dataset(tmp_path_factory.mktemp("quant data"), folder="2_sks shape")


def losses(run_dir: Path) -> list[float]:
    return [e["loss"] for e in events(run_dir) if e["type"] == "progress"]


def test_each_mode_trains_like_the_unquantized_model_and_its_lora_loads_unquantized(
        tiny_sd1_dir: Path, dataset: Path, tmp_path: Path) -> None:
    from diffusers import StableDiffusionPipeline

    common = dict(pretrained_model_name_or_path=str(tiny_sd1_dir), train_data_dir=str(dataset), **SMALL)
    assert train("lora", tmp_path / "run-none", output_dir=str(tmp_path / "none"), **common) == 0
    reference = losses(tmp_path / "run-none")
    plain, _ = read_lora_file(tmp_path / "none" / "lora.safetensors")
    pipe = StableDiffusionPipeline.from_pretrained(tiny_sd1_dir, safety_checker=None)
    without = fixed_seed_image(pipe)
    for mode in ("int8", "int4", "nf4"):
        run = tmp_path / f"run-{mode}"
        assert train("lora", run, output_dir=str(tmp_path / mode), base_model_precision=mode,
                     text_encoder_precision=mode, **common) == 0, [e for e in events(run) if e["type"] == "error"]
        got = losses(run)
        assert len(got) == 5 and all(abs(a - b) <= LOSS_TOLERANCE * b for a, b in zip(got, reference)), (mode, got,
                                                                                                           reference)
        lora = tmp_path / mode / "lora.safetensors"
        state, _ = read_lora_file(lora)
        assert state.keys() == plain.keys()  # the same modules as a LoRA trained on the unquantized model
        pipe.unload_lora_weights()
        assert not torch.equal(fixed_seed_image(pipe, lora), without), mode  # it loads and changes the image


def test_fp8_base_model_precision_trains_in_bf16(tiny_sd1_dir: Path, dataset: Path, tmp_path: Path) -> None:
    """fp8 stores the weights in 8-bit floats and computes in the mixed-precision dtype (fp8_base is the same mode:
    tests/quant/test_quant_options.py)."""
    # its own process: accelerate's mixed precision is set once a process
    result = run_trainer(sets(pretrained_model_name_or_path=str(tiny_sd1_dir), train_data_dir=str(dataset),
                              output_dir=str(tmp_path / "out"), mixed_precision="bf16", base_model_precision="fp8",
                              text_encoder_precision="fp8", **SMALL), tmp_path / "run")
    assert result.returncode == 0, result.stderr[-3000:]
    got = losses(tmp_path / "run")
    assert len(got) == 5 and all(math.isfinite(loss) for loss in got)
    state, _ = read_lora_file(tmp_path / "out" / "lora.safetensors")
    assert max(t.abs().max().item() for k, t in state.items() if k.endswith("lora_up.weight")) > 0


def test_a_mode_the_platform_cannot_run_is_refused_by_name_before_the_model_loads(tiny_sd1_dir: Path, dataset: Path,
                                                                                    tmp_path: Path,
                                                                                    monkeypatch) -> None:
    import trainers.quant.apply as apply

    def no_bitsandbytes(*args: object) -> None:
        raise ImportError("No module named 'bitsandbytes'")

    apply.platform_problem.cache_clear()
    monkeypatch.setattr(apply, "_nf4", no_bitsandbytes)
    loaded = []
    monkeypatch.setattr("trainers.train.session.load_model", lambda *a, **k: loaded.append(a))
    assert train("lora", tmp_path / "run", pretrained_model_name_or_path=str(tiny_sd1_dir),
                 train_data_dir=str(dataset), output_dir=str(tmp_path / "out"), base_model_precision="nf4",
                 **SMALL) == 2
    apply.platform_problem.cache_clear()
    error = next(e for e in events(tmp_path / "run") if e["type"] == "error")
    assert "base_model_precision" in error["message"] and "bitsandbytes" in error["message"] and not loaded
