"""What the loop tells the world: progress events, the terminal bar and TensorBoard (saves: saving.py)."""
from __future__ import annotations

from dataclasses import asdict, replace
from typing import Any

import torch

from trainers.core.events import Start
from trainers.train.distributed import STRAGGLER_EVERY, RankTimer, StragglerCheck
from trainers.train.memory_watch import MemoryWatch
from trainers.train.method import StepHook
from trainers.train.progress import ProgressMeter
from trainers.train.session import Session


class Reporter:
    """Progress of a run on every channel; only rank 0 writes, every rank joins the loss average."""

    def __init__(self, session: Session, family: str, trainable_params: int,
                 hooks: list[StepHook] | None = None) -> None:
        cfg, plan = session.cfg, session.plan
        self.hooks = hooks or []
        self.accelerator, self.events, self.plan = session.accelerator, session.events, plan
        self.meter = ProgressMeter(plan.total_steps, plan.global_batch)
        self.unloadable: set[str] = set()
        from tqdm.auto import tqdm

        self.bar = tqdm(total=plan.total_steps, disable=not self.accelerator.is_main_process, desc="steps",
                        dynamic_ncols=True)
        if self.accelerator.log_with:  # logging_dir, or the run folder's logs/
            hparams = {k: v if isinstance(v, (int, float, str, bool)) else str(v) for k, v in cfg.values.items()
                       if v is not None}
            run_name = session.run_dir.name if session.run_dir is not None else cfg.method  # one folder per run
            self.accelerator.init_trackers(run_name, config=hparams)
        self.events.emit(Start(plan=asdict(plan), family=family, trainable_params=trainable_params))
        self.rank_timer = session.rank_timer or RankTimer()
        every = max(1, min(STRAGGLER_EVERY, plan.total_steps))  # short runs compare once, at the end
        self.stragglers = StragglerCheck(self.accelerator, every)
        self.memory = (MemoryWatch(cfg, session.run_dir, self.accelerator.device, session.resident_before_model)
                       if self.accelerator.is_main_process else None)

    def start_timing(self, from_step: int = 0) -> None:
        """Rates count from here (after any samples made before the first step); a resumed run's bar starts at its step."""
        self.meter.start()
        if from_step:
            self.bar.update(from_step)
        self.rank_timer.restart()

    def step(self, step: int, epoch: int, loss: torch.Tensor, lr: float, data_wait: float) -> None:
        """Report optimizer step `step`, which trained with learning rate `lr` (as the planned schedule counts)."""
        own_s = self.rank_timer.step_done(data_wait)
        buckets, self.rank_timer.buckets = self.rank_timer.buckets, 0
        per_rank, straggler = self.stragglers.add(step, own_s)
        loss_value = self.accelerator.reduce(loss.detach(), reduction="mean").item()
        if not self.accelerator.is_main_process:
            return
        progress = replace(
            self.meter.update(step, epoch, self.plan.epochs, loss_value, lr, data_wait),
            step_s_own=round(own_s, 4),  # rank 0's own work (without waiting for the others)
            rank_step_s=[round(t, 4) for t in per_rank] if per_rank is not None else None,
            grad_buckets=buckets if self.rank_timer.ddp else None,
            **{k: v for hook in self.hooks for k, v in hook.progress().items()})
        if straggler:
            self.events.warn(straggler)
        spilling = self.memory.guard.step(own_s) if self.memory else None
        if spilling:
            self.events.warn(spilling)
        if step == 1 and self.memory:
            self.memory.record()
        self.events.emit(progress)
        self.accelerator.log({"loss": progress.loss, "loss_smoothed": progress.loss_smoothed, "lr": progress.lr},
                             step=step)
        self.bar.update(1)
        self.bar.set_postfix(loss=f"{progress.loss_smoothed:.4f}", epoch=epoch)

    def unloadable_files(self, problems: Any) -> None:
        """Files that failed to decode mid-epoch (another image of their bucket trained instead), once each."""
        for problem in problems:
            if problem not in self.unloadable:
                self.unloadable.add(problem)
                self.events.warn(f"an image failed to load; another image of its bucket was trained instead: {problem}")

    def close(self) -> None:
        self.bar.close()
        if self.memory:
            self.memory.record()
