"""The spill guard (a step that suddenly takes much longer while the GPU is nearly full: the page says the run is
spilling and what to change) and the run panel's estimate vs measured memory."""
from __future__ import annotations

from trainers.core.events import Progress
from trainers.core.options import TrainConfig
from trainers.train.memory_watch import SpillGuard

GIB = 2**30


class FakeCard:
    """A 24 GiB card whose free memory the test sets."""

    def __init__(self) -> None:
        self.free = 8 * GIB

    def __call__(self) -> tuple[int, int]:
        return self.free, 24 * GIB


def test_a_slow_step_on_a_full_card_is_named_once_with_the_options_to_change() -> None:
    card = FakeCard()
    guard = SpillGuard(TrainConfig("lora", {"model_family": "flux", "train_batch_size": 2}), card)
    assert [guard.step(1.0) for _ in range(5)] == [None] * 5
    assert guard.step(3.5) is None  # slow, but memory is free: something else (a sample, the disk)
    card.free = GIB // 4
    assert guard.step(1.1) is None  # full, but not slower: the allocator holds what it freed
    message = guard.step(3.5)
    assert message is not None and "spilling out of GPU memory" in message and "3.50 s" in message
    for option in ("base_model_precision = 'int8'", "layer_offload_fraction = 0.5", "gradient_checkpointing",
                   "train_batch_size"):
        assert option in message
    assert guard.step(4.0) is None  # said once


def test_the_advice_leaves_out_what_the_run_already_does() -> None:
    card = FakeCard()
    card.free = 0
    guard = SpillGuard(TrainConfig("lora", {"base_model_precision": "nf4", "layer_offload_fraction": 0.5,
                                            "gradient_checkpointing": True}), card)
    for seconds in (1.0, 1.0, 1.0):
        guard.step(seconds)
    message = guard.step(5.0)
    assert "base_model_precision" not in message and "layer_offload_fraction" not in message
    assert "gradient_checkpointing" not in message and "resolution" in message


def test_no_reader_no_guard() -> None:  # a CPU run has no card to fill
    guard = SpillGuard(TrainConfig("lora"), None)
    assert [guard.step(s) for s in (1.0, 1.0, 1.0, 9.0)] == [None] * 4


def test_the_run_panel_shows_the_estimate_beside_the_measured_peak() -> None:
    from gui.run_files import RunView
    from gui.run_panel import memory_text
    from trainers.core.rundir import RunState

    progress = Progress(step=3, total_steps=10, epoch=1, total_epochs=1, loss=0.1, loss_smoothed=0.1, lr=1e-4,
                        it_per_s=1.0, images_per_s=1.0, eta_s=7.0, peak_mem_gb=11.5, peak_mem_kind="cuda")
    view = RunView("run", RunState.RUNNING, {"memory_estimate_gb": 11.2, "memory_peak_gb": 11.9,
                                             "memory_peak_kind": "cuda"}, progress)
    assert memory_text(view) == ("peak memory 11.50 GB (cuda) · model memory: 11.20 GB estimated, 11.90 GB "
                                 "measured (cuda)")


class FakeShared:
    """The driver's shared GPU memory use (Windows, WDDM), which the test sets."""

    def __init__(self) -> None:
        self.used = GIB // 8

    def __call__(self) -> int:
        return self.used


def test_a_slow_step_while_the_driver_lends_system_ram_is_named_though_the_card_looks_free() -> None:
    card, shared = FakeCard(), FakeShared()
    card.free = 6 * GIB  # WDDM counts what it lends from system RAM as free card memory
    guard = SpillGuard(TrainConfig("finetune", {"model_family": "sdxl"}), card, read_shared=shared)
    assert [guard.step(1.0) for _ in range(4)] == [None] * 4
    assert guard.step(3.0) is None  # slow, but nothing lent beyond what was at the start
    shared.used += 3 * GIB
    message = guard.step(3.0)
    assert message is not None and "3.00 GiB more of system RAM lent to the GPU" in message
    assert "layer_offload_fraction = 0.5" in message


def test_linux_has_no_shared_gpu_memory_and_windows_reads_the_adapters_counter(monkeypatch) -> None:
    import sys

    from trainers.train import memory_watch

    monkeypatch.setattr(sys, "platform", "linux")
    assert memory_watch.shared_memory_reader() is None
    sample = ('"(PDH-CSV 4.0)","\\\\PC\\GPU Adapter Memory(luid_0x1_phys_0)\\Shared Usage",'
              '"\\\\PC\\GPU Adapter Memory(luid_0x2_phys_0)\\Shared Usage"\n'
              '"11/26/2026 05:00:00.000","1073741824.000000","536870912.000000"\n')
    assert memory_watch.parse_typeperf(sample) == 3 * GIB // 2
    assert memory_watch.parse_typeperf("Error: no such counter") is None
