"""Faults during training, injected in this process: NaN losses, out of memory, SIGTERM; and the advice
and checks behind them."""
from __future__ import annotations

import json
import os
import signal
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from trainers.core.errors import NonFiniteLoss
from trainers.core.options import TrainConfig
from trainers.methods import method_memory_tips
from trainers.train.faults import is_out_of_memory, memory_suggestions, out_of_memory

from helpers import events, train
from test_resume import dataset, lora, lora_file  # noqa: F401 - fixtures


def inject(monkeypatch: pytest.MonkeyPatch, fault: Callable[[int, torch.Tensor], torch.Tensor]) -> None:
    """Replace the LoRA's step loss with `fault(call number, real loss)` (one call per batch; 1-based)."""
    import trainers.methods.lora.objectives as loop  # the LoRA's objective: its images' denoising loss

    real, calls = loop.diffusion_loss, [0]

    def loss(*args, **kwargs) -> torch.Tensor:
        calls[0] += 1
        return fault(calls[0], real(*args, **kwargs))

    monkeypatch.setattr(loop, "diffusion_loss", loss)


@pytest.mark.slow
def test_nan_losses_are_skipped_then_stop_the_run_and_nothing_saved_is_nan(lora: dict, tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    inject(monkeypatch, lambda n, loss: loss * float("nan") if n >= 3 else loss)
    code = train("lora", tmp_path / "run", **lora, max_train_steps=20, nan_steps_before_stop=3, save_every_n_steps=1)
    evs = events(tmp_path / "run")
    error = evs[-1]
    assert code == 1 and error["type"] == "error" and error["kind"] == "non_finite_loss"
    assert "NaN/inf for 3 steps in a row (steps 3-5)" in error["message"] and "weights are those of step 2" in \
        error["message"] and "learning_rate" in error["message"] and "trace" not in error
    assert any("NaN/inf at step 3; that update was skipped" in e.get("message", "") for e in evs)
    assert json.loads((tmp_path / "run" / "status.json").read_text())["state"] == "failed"
    saved = [Path(e["path"]) for e in evs if e["type"] == "checkpoint"]
    assert [p.name for p in saved[:4]] == [f"lora-step{s:08d}.safetensors" for s in (1, 2, 3, 4)]
    for path in saved[:4]:
        assert all(torch.isfinite(t).all() for t in lora_file(path).values()), path
    assert lora_file(saved[1]).keys() == lora_file(saved[3]).keys()
    for key, value in lora_file(saved[1]).items():  # updates of NaN steps were never applied
        assert torch.equal(value, lora_file(saved[3])[key])
    state = Path(error["saved_state"])  # an emergency state of the sound weights, to resume with other settings
    assert state.name == "lora-step00000005-state" and saved[-1] == state


@pytest.mark.slow
def test_out_of_memory_ends_with_suggestions_and_an_emergency_state(lora: dict, tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    def oom(n: int, loss: torch.Tensor) -> torch.Tensor:
        if n == 3:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total "
                                              "capacity of 8.00 GiB of which 1.10 GiB is free.")
        return loss

    inject(monkeypatch, oom)
    code = train("lora", tmp_path / "run", **lora, max_train_steps=10)
    error = events(tmp_path / "run")[-1]
    assert code == 1 and error["kind"] == "out_of_memory"
    assert error["message"].startswith("out of GPU memory at step 3 (tried to allocate 2.00 GiB). To fit: ")
    tips = " | ".join(error["suggestions"])
    assert "train_batch_size (now 2)" in tips and "gradient_checkpointing" in tips and "AdamW8bit" in tips
    assert "cache_latents" in tips and "lower resolution" not in tips  # 64 px is small already
    assert Path(error["saved_state"]).name == "lora-step00000002-state" and Path(error["saved_state"]).is_dir()


@pytest.mark.slow
def test_sigterm_saves_the_training_state_and_exits(lora: dict, tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    def term(n: int, loss: torch.Tensor) -> torch.Tensor:
        if n == 2:
            os.kill(os.getpid(), signal.SIGTERM)  # what `kill`, systemd or a spot-instance shutdown sends
        return loss

    inject(monkeypatch, term)
    assert train("lora", tmp_path / "run", **lora, max_train_steps=50) == 0
    status = json.loads((tmp_path / "run" / "status.json").read_text())
    assert status["state"] == "stopped" and "stopped on request at step 2" in status["message"]
    assert (tmp_path / "out" / "lora-step00000002-state" / "manifest.json").is_file()
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL


def test_out_of_memory_is_recognised_and_advice_follows_the_config() -> None:
    assert is_out_of_memory(torch.cuda.OutOfMemoryError("CUDA out of memory"))
    assert is_out_of_memory(RuntimeError("[enforce fail at alloc_cpu.cpp:117] DefaultCPUAllocator: can't allocate "
                                         "memory: you tried to allocate 1234 bytes"))
    assert not is_out_of_memory(RuntimeError("shape mismatch"))
    heavy = TrainConfig("finetune", {"train_batch_size": 4, "resolution": "1024", "use_ema": "gpu",
                                     "train_text_encoder": True, "mixed_precision": "bf16"})
    tips = memory_suggestions(heavy, method_memory_tips(heavy))
    for expected in ("train_batch_size (now 4)", "gradient_checkpointing", "full_bf16", "AdamW8bit", "cache_latents",
                     "use_ema = 'cpu'", "train_text_encoder = false", "lower resolution (now 1024; e.g. '768')"):
        assert any(expected in tip for tip in tips), expected
    lean = heavy.replace(train_batch_size=1, resolution="512", use_ema="cpu", train_text_encoder=False,
                         gradient_checkpointing=True, full_bf16=True, optimizer_type="Adafactor", cache_latents=True)
    assert memory_suggestions(lean, method_memory_tips(lean)) == []
    err = out_of_memory(lean, torch.cuda.OutOfMemoryError("CUDA out of memory."), 0, method_memory_tips(lean))
    assert "in the first step" in str(err) and "already save memory" in str(err)
    assert str(out_of_memory(lean, MemoryError(), 7, [])).startswith("out of system memory at step 8")


def test_weights_that_are_not_finite_are_never_saved(tmp_path: Path) -> None:
    from trainers.train.saving import Saver

    saver = Saver.__new__(Saver)
    saver.state = SimpleNamespace(params=[torch.ones(3), torch.tensor([1.0, float("nan")])])
    saver.out_dir = tmp_path
    with pytest.raises(NonFiniteLoss, match="contain NaN/inf; lora.safetensors was not saved"):
        saver._check("lora.safetensors", 10)
    saver.state.params[1] = torch.ones(2)
    saver._check("lora.safetensors", 10)


@pytest.mark.slow  # a process of its own
def test_a_stop_signal_during_a_hung_step_exits_within_the_deadline(tmp_path: Path) -> None:
    import subprocess
    import sys
    import time

    script = """
import os, signal, sys, time
from pathlib import Path
import trainers.train.control as control
control.STOP_DEADLINE_S = 0.5
class Accelerator: is_main_process, num_processes = True, 1
ctl = control.Control(Path(sys.argv[1]), Accelerator())
ctl.poll(); time.sleep(0.3); ctl.poll()  # steps take 0.3 s: the deadline is 0.5 + 2 x 0.3 s
os.kill(os.getpid(), signal.SIGTERM)
time.sleep(60)  # a step that never ends
"""
    started = time.monotonic()
    result = subprocess.run([sys.executable, "-c", script, str(tmp_path)], capture_output=True, text=True,
                            timeout=60, env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])})
    assert result.returncode == 124 and time.monotonic() - started < 30
    assert "no training step ended within" in result.stderr
    status = json.loads((tmp_path / "status.json").read_text())
    assert status["state"] == "stopped" and "exited without saving" in status["message"]
