"""The training loop shared by every method. Methods supply a Trainable (trainers/train/method.py); this runs it."""
from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from trainers.core.options.typed import LoggingOptions, SamplingOptions, SavingOptions
from trainers.core.rundir import Request
from trainers.core.saves import Position
from trainers.train.control import ROLLING_STATE
from trainers.train.diffusion import NoiseOptions
from trainers.train.faults import LossGuard
from trainers.train.live_render import live_renderer, went_on
from trainers.train.method import Trainable
from trainers.train.optim import OptimizerModes, build_lr_scheduler, build_optimizer
from trainers.train.pauses import Pauses
from trainers.train.reporting import Reporter
from trainers.train.sample_hook import effect_renders, sample_hook
from trainers.train.saving import HealthCheck, Saver, saved_on_failure
from trainers.train.scoring import ScoreStart, scored
from trainers.train.session import Session
from trainers.train.state import TrainingState, resume_folder
from trainers.train.user_pause import UserPause
from trainers.train.validation import validation_hook


def train(session: Session, trainable: Trainable, health: HealthCheck | None = None,
          scores: ScoreStart | None = None) -> Path:
    """Run the whole training (the rest of it, with `resume`) and return the final output file; `health` checks
    every save, `scores` scores every sampling on the main process (trainers/health/, trainers/scores/: handed in
    from above)."""
    cfg, accelerator, plan = session.cfg, session.accelerator, session.plan
    saving, sampling, logging = SavingOptions.of(cfg), SamplingOptions.of(cfg), LoggingOptions.of(cfg)
    params = [p for group in trainable.param_groups for p in group["params"]]
    optimizer = build_optimizer(cfg, trainable.param_groups, warn=session.events.warn)
    lr_scheduler = build_lr_scheduler(cfg, optimizer, plan.total_steps, plan.num_processes)
    swapping = session.block_swap is not None
    if swapping and trainable.predictor.extra is not None:  # placed already: accelerate would move the swapped
        trainable.predictor.extra.to(accelerator.device)  # blocks' weights onto the device (a finetune has no extra)
    predictor, optimizer, loader = accelerator.prepare(trainable.predictor, optimizer, session.loader,
                                                       device_placement=[False, True, True] if swapping else None)
    params = [p for group in optimizer.param_groups for p in group["params"]]  # FSDP2 replaced them with its shards
    noise = NoiseOptions.from_config(cfg, trainable.model.prediction_type)
    state = TrainingState(session, trainable, predictor, optimizer, lr_scheduler, params)
    report = Reporter(session, trainable.model.family.name, sum(p.numel() for p in params), trainable.hooks)
    modes = OptimizerModes(optimizer, cfg)  # schedule-free optimizers: eval() for samples and saves
    pause = Pauses(session.run_dir, accelerator.is_main_process, modes, report.meter)
    effect = effect_renders(session, trainable.model, trainable.without_output, trainable.sampling_weights,
                            trainable.sampling_prompt) if health is not None else None
    save = Saver(session, trainable, state, pause, health, effect)
    guard = LossGuard(cfg, accelerator, params, session.events)
    scorer = scores(session) if scores is not None and accelerator.is_main_process else None
    sample = pause.around(scored(sample_hook(session, trainable.model, trainable.sampling_weights,
                                             trainable.sampling_prompt), scorer), "sampling")
    validate = pause.around(validation_hook(session, trainable.model, predictor, noise, report.meter), "validating")
    user = UserPause(session.control, pause, session.run_dir, accelerator.is_main_process,  # renders while paused
                     live_renderer(session, trainable), lambda left, step: went_on(session, left, step))
    at, data_wait = Position(), 0.0
    with saved_on_failure(session, save, lambda: at):  # an emergency state on errors; memory advice on OOM
        if saving.resume.strip():
            at = state.restore(resume_folder(saving))
        save.refuse_overwrites(at)  # the planned step and epoch saves, before the first step
        if sample and sampling.sample_at_first and not at.step:
            sample(0, 0)
        predictor.train()
        modes.train()  # also after a resume: a state saved in eval mode comes back in eval mode
        report.start_timing(at.step)
        for epoch in range(at.next_epoch(), plan.epochs + 1):
            skip = at.batches if epoch == at.epoch else 0
            for index, (batch, waited) in enumerate(_timed(epoch_batches(session, loader, epoch, skip)), skip + 1):
                data_wait += waited
                report.unloadable_files(batch.pop("problems", ()))
                with accelerator.accumulate(predictor):
                    loss = trainable.objective(predictor, trainable.model, batch, noise, session.weight_dtype)
                    accelerator.backward(loss)
                    for hook in trainable.hooks:
                        hook.after_backward()
                    if accelerator.sync_gradients:
                        guard.clip_or_drop()  # clip to max_grad_norm; a NaN/inf gradient is dropped, not applied
                    optimizer.step()
                    optimizer.zero_grad(set_to_none=True)
                if not accelerator.sync_gradients:
                    continue
                lr = lr_scheduler.get_last_lr()[0]  # the rate this step trained with: stepping moves to the next
                lr_scheduler.step()
                at = Position(at.step + 1, epoch, index)
                for hook in trainable.hooks:
                    hook.after_step(at.step)
                report.step(at.step, epoch, loss, lr, data_wait)
                guard.after_step(at.step)  # nan_steps_before_stop dropped updates in a row end the run
                data_wait = 0.0
                requests = user.held(session.control.poll(), at.step)  # Pause waits here for Continue or Stop
                if Request.STOP in requests:
                    raise save.stop(at)
                if Request.SAVE_NOW in requests or _due(saving.save_every_n_steps, at.step) and at.step < plan.total_steps:
                    save.step(at)
                if ROLLING_STATE in requests:
                    save.rolling(at)  # unless that save wrote a state of this step
                if sample and _due(sampling.sample_every_n_steps, at.step):
                    sample(at.step, epoch)
                if validate and _due(logging.validate_every_n_steps, at.step):
                    validate(at.step, epoch, "step")
                if at.step >= plan.total_steps:
                    break
            at = replace(at, epoch_done=at.batches >= session.sampler.groups_per_epoch())
            if validate and _due(logging.validate_every_n_epochs or 1, epoch):  # sd-scripts: every epoch by default
                validate(at.step, epoch, "epoch")
            if _due(saving.save_every_n_epochs, epoch) and epoch < plan.epochs:
                save.epoch(at)
            if sample and _due(sampling.sample_every_n_epochs, epoch):
                sample(at.step, epoch)
            if at.step >= plan.total_steps:
                break
        report.close()
        final = save.final(at)
        if scorer is not None:
            scorer.finish()  # the final save's scores and the best save into its metadata
    accelerator.end_training()
    return final


def epoch_batches(session: Session, loader: Any, epoch: int, skip: int) -> Any:
    """The batches of `epoch` (1-based) after the first `skip` (a resumed epoch): the same as an uninterrupted run's."""
    session.sampler.set_epoch(epoch - 1)
    if hasattr(loader, "set_epoch"):  # accelerate's loader sets its sampler's epoch from its own count
        loader.set_epoch(epoch - 1)
    return session.accelerator.skip_first_batches(loader, skip) if skip else loader


def _due(every: int | None, count: int) -> bool:
    return every is not None and every != 0 and count % every == 0


def _timed(iterable: Any) -> Any:
    """Yield (item, seconds spent waiting for it): the data-loading share of step time."""
    iterator = iter(iterable)
    while True:
        started = time.perf_counter()
        try:
            item = next(iterator)
        except StopIteration:
            return
        yield item, time.perf_counter() - started
