"""Every save of a run: the method's output and training states.

Saves happen on the main process behind barriers, after a free-disk check, never with non-finite
weights, and retention runs after each one. A failing run makes an emergency state when its
weights are sound (`saved_on_failure`).
"""
from __future__ import annotations

import contextlib
import errno
import gc
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from trainers.core.errors import ConfigError, DiskFull, NonFiniteLoss, TrainingFailed, TrainingStopped
from trainers.core.events import Checkpoint, Health
from trainers.core.fsio import clean_stale_temps, remove_save
from trainers.core.overwrites import overwrite_issue
from trainers.core.options.typed import SavingOptions
from trainers.core.options.validation import states_supported
from trainers.core.retention import Retention, prune
from trainers.core.saves import (Position, SaveName, check_free_space, find_states, planned_saves, save_name,
                                 state_name, written_before)
from trainers.train.control import ROLLING_STATE
from trainers.train.distributed import full_weights
from trainers.train.faults import is_out_of_memory, out_of_memory, weights_finite

if TYPE_CHECKING:
    from trainers.train.method import Trainable
    from trainers.train.pauses import Pauses
    from trainers.train.sample_hook import EffectRenders
    from trainers.train.session import Session
    from trainers.train.state import TrainingState


class HealthCheck(Protocol):
    """The health check of one save, handed in from above (trainers/health/report.py `check_and_write`): writes the
    report to the run's health/ folder and returns it ("verdict", "warnings", "report": its path). `renders`: the
    effect check's (base image, image with the save), or the reason the effect was not checked."""

    def __call__(self, saved: Path, run_dir: Path, family: str | None,
                 renders: "tuple[Path, Path] | str") -> dict[str, Any]: ...


class Saver:
    def __init__(self, session: "Session", trainable: "Trainable", state: "TrainingState",
                 pause: "Pauses | None" = None, health: HealthCheck | None = None,
                 effect: "EffectRenders | None" = None) -> None:
        self.session, self.trainable, self.state = session, trainable, state
        self.pause = pause  # saves are written in the optimizer's eval mode and kept out of it/s
        self.health, self.effect = health, effect  # every save's check (main process), its renders (every process)
        cfg = session.cfg
        self.opts = opts = SavingOptions.of(cfg)
        self.name = opts.output_name
        self.out_dir = Path(opts.output_dir).expanduser()
        self.retention = Retention.of(cfg.values)
        self.main = session.accelerator.is_main_process
        # FSDP1's flat parameters have no per-parameter names to save them by (TrainingState's layouts: state.py)
        self.with_states = states_supported(cfg.values)
        if not self.with_states and self.main and (opts.save_state or opts.save_state_on_train_end):
            self._warn("training states are not saved with FSDP1 (fsdp_version = 1); saves and Stop write the model "
                       "only: use fsdp_version = 2 or distributed_backend = 'deepspeed' to save states")
        if opts.save_state_every_n_minutes and self.with_states:
            session.control.schedule(ROLLING_STATE, opts.save_state_every_n_minutes * 60)
        if self.main:
            for left in clean_stale_temps(self.out_dir, self.name):
                print(f"removed {left}, left over from a save that was interrupted", flush=True)

    # --- what the loop calls ---

    def refuse_overwrites(self, at: Position) -> None:
        """Before the first step (of a resumed run too): a ConfigError naming the first file that a planned step or
        epoch save would replace and that neither this run nor the runs it resumes wrote (unless overwrite_output)."""
        issue = None
        if self.main:
            names = planned_saves(self.name, self.opts.save_every_n_steps, self.opts.save_every_n_epochs,
                                  self.session.plan, at)
            issue = overwrite_issue(self.session.cfg, self.session.outputs, names, self.state.run_started)
        issue = self._agree(issue)
        if issue is not None:
            raise ConfigError([issue])

    def epoch(self, at: Position) -> Path:
        return self._save(save_name(self.name, epoch=at.epoch), at, "epoch")

    def step(self, at: Position) -> Path:
        return self._save(save_name(self.name, step=at.step), at, "step")

    def final(self, at: Position) -> Path:
        path = self._save(self.name, at, "final", with_state=self.opts.save_state or self.opts.save_state_on_train_end)
        if self.main:  # rolling states guard against a crash; the run is complete now
            for state in find_states(self.out_dir, self.name):
                if state.kind == "rolling":
                    remove_save(state.path)
        return path

    def stop(self, at: Position) -> TrainingStopped:
        """Save the output and the training state for a requested stop; the loop raises what it returns."""
        self.session.control.acknowledge()
        name = save_name(self.name, step=at.step)
        path = self._save(name, at, "stop", with_state=True)
        return TrainingStopped(path, self.out_dir / state_name(name) if self.with_states else None, at.step)

    def rolling(self, at: Position) -> None:
        """A training state every save_state_every_n_minutes; a full disk skips it with a warning."""
        folder = self.out_dir / state_name(save_name(self.name, step=at.step))
        self.session.accelerator.wait_for_everyone()
        skip = None  # the main process's reason not to write it
        if self.main and folder.exists():
            skip = "written already"
        elif self.main:
            try:
                self._check("a training state", self.state.nbytes())
            except TrainingFailed as err:
                skip = f"rolling training state skipped: {err}"
                self._warn(skip)
        if self._agree(skip) is None:  # every process writes its part, or none does
            self.state.save(folder, at, "rolling")
            if self.main:
                self._announce(folder, at, "rolling", state=folder)
                prune(self.out_dir, self.name, self.retention, at)
        self.session.accelerator.wait_for_everyone()

    def emergency(self, at: Position) -> Path | None:
        """After an error, on this process alone (no barriers): a state of the last finished step, if sound."""
        resumed = self.state.resumed_at.step if self.state.resumed_at else 0
        if not self.main or not self.with_states or self.state.collective or at.step <= resumed:  # needs them all
            return None
        folder = self.out_dir / state_name(save_name(self.name, step=at.step))
        if folder.exists():  # this run's own (a save of this step), or another's, not to be replaced
            return None if written_before(folder, self.state.run_started) else folder
        try:
            self._check("an emergency training state", self.state.nbytes())
            self.state.save(folder, at, "emergency")
        except Exception as err:  # noqa: BLE001 - the original error matters more
            print(f"warning: no emergency training state: {err}", file=sys.stderr, flush=True)
            return None
        self._announce(folder, at, "emergency", state=folder)
        print(f"saved an emergency training state: {folder} (resume with resume = 'latest')", flush=True)
        return folder

    # --- the work ---

    def _save(self, name: str, at: Position, kind: str, with_state: bool | None = None) -> Path:
        with self.pause("saving") if self.pause else contextlib.nullcontext():
            return self._write(name, at, kind, with_state)

    def _write(self, name: str, at: Position, kind: str, with_state: bool | None = None) -> Path:
        accelerator = self.session.accelerator
        with_state = self.opts.save_state if with_state is None else with_state
        path = self.out_dir / f"{name}{self.trainable.output.suffix}"
        folder = self.out_dir / state_name(name) if with_state and self.with_states else None
        accelerator.wait_for_everyone()
        problem = None
        if self.main:
            needed = self.trainable.output.nbytes() + (self.state.nbytes() if folder else 0)
            try:
                self._check(f"{path.name}" + (" and its training state" if folder else ""), needed)
                self._check_not_foreign(name, folder is not None)
            except TrainingFailed as err:
                problem = (type(err).__name__, str(err))
        problem = self._agree(problem)
        if problem:
            raise {"NonFiniteLoss": NonFiniteLoss, "DiskFull": DiskFull}.get(problem[0], TrainingFailed)(problem[1])
        with full_weights(accelerator):  # FSDP: rank 0 holds the whole weights while it writes (every rank joins)
            if self.main:
                self.trainable.output.save(path, at.epoch, at.step)
        if folder is not None:
            self.state.save(folder, at, kind, output=path)  # every process: gathers or writes its shards
        if self.main:
            self._announce(path, at, kind, state=folder)
        if self.health is not None and self.session.run_dir is not None:
            renders = self.effect(path.name) if self.effect is not None else "the effect was not checked"
            if self.main:
                self._check_health(path, at, renders)
        if self.main and kind != "final":
            for gone in prune(self.out_dir, self.name, self.retention, at):
                print(f"removed {gone} (retention)", flush=True)
        accelerator.wait_for_everyone()
        return path

    def _check_health(self, path: Path, at: Position, renders: "tuple[Path, Path] | str") -> None:
        """The save's health report and its event; a check that fails is a warning with its reason."""
        assert self.health is not None and self.session.run_dir is not None
        try:
            report = self.health(path, self.session.run_dir, self.session.model.family.name, renders)
        except Exception as err:  # noqa: BLE001 - a failed check must not end the run, nor pass silently
            reason = f"the health check of {path.name} failed: {type(err).__name__}: {err}"
            self._warn(reason)
            self.session.events.emit(Health(path=str(path), step=at.step, verdict="warnings", warnings=[reason]))
            return
        for warning in report["warnings"]:
            print(f"health of {path.name}: {warning}", flush=True)
        self.session.events.emit(Health(path=str(path), step=at.step, verdict=report["verdict"],
                                        warnings=list(report["warnings"]), report=report.get("report")))

    def _check(self, what: str, needed: int) -> None:
        """Raise NonFiniteLoss for non-finite weights, DiskFull for too little space."""
        if not weights_finite(self.state.params):
            raise NonFiniteLoss(f"the trained weights contain NaN/inf; {what} was not saved (earlier saves are "
                                "kept). Lower learning_rate, or resume from an earlier training state")
        check_free_space(self.out_dir, needed, what)

    def _check_not_foreign(self, name: str, with_state: bool) -> None:
        """Raise TrainingFailed when the save `name` would replace a file this run did not write (one that came
        since the start, or a stop's or save-now's name that no plan foresaw)."""
        save = SaveName.parse(name, self.name)
        issue = overwrite_issue(self.session.cfg, self.session.outputs, [save], self.state.run_started,
                                with_state) if save else None
        if issue is not None:
            raise TrainingFailed(f"{issue.message}; the save was not written (earlier saves are kept)")

    def _agree(self, problem: Any) -> Any:
        """The main process's verdict, on every process (they raise together or not at all)."""
        if self.session.accelerator.num_processes == 1:
            return problem
        from accelerate.utils import broadcast_object_list

        holder = [problem]
        broadcast_object_list(holder, from_process=0)
        return holder[0]

    def _announce(self, path: Path, at: Position, kind: str, state: Path | None) -> None:
        self.session.events.emit(Checkpoint(path=str(path), epoch=at.epoch, step=at.step, final=kind == "final",
                                            kind=kind, state=str(state) if state else None))

    def _warn(self, message: str) -> None:
        self.session.events.warn(message)


@contextlib.contextmanager
def saved_on_failure(session: "Session", saver: Saver, where: Callable[[], Position]) -> Iterator[None]:
    """An unexpected error saves an emergency state (when the weights are sound) and ends the run with its
    cause; running out of memory ends it with what to change in the config."""
    try:
        yield
    except TrainingStopped:
        raise
    except Exception as err:
        at = where()
        oom = is_out_of_memory(err)
        if oom:
            _free_memory()
        if isinstance(err, OSError) and err.errno == errno.ENOSPC:  # the size estimate was short
            raise DiskFull(f"the disk of output_dir ({saver.out_dir}) is full ({err}); free some space, then resume "
                           "(resume = 'latest')") from err
        state = None if isinstance(err, DiskFull) else saver.emergency(at)
        if oom:
            failure = out_of_memory(session.cfg, err, at.step, session.memory_tips(session.cfg))
            failure.details["saved_state"] = str(state) if state else None
            raise failure from err
        if isinstance(err, TrainingFailed):
            err.details["saved_state"] = str(state) if state else None
        raise
    finally:
        session.control.close()


def _free_memory() -> None:
    import torch

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
