"""One training process from start to end: load the config, set up, train, and record how it ended.

Every ending reaches the run directory (status.json and a done or error event) with a message a
user can act on; known causes (bad input, NaN loss, out of memory, full disk) carry no traceback.

A config that Validate refuses is refused before torch, diffusers, transformers, peft or accelerate load: the
checks are handed in (`Checks`, from trainers/preflight/ above the methods) and run before `_train` imports them.
"""
from __future__ import annotations

import os
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from trainers.core.lifecycle import Lifecycle
from trainers.core.options import TrainConfig, load_config
from trainers.core.options.typed import SavingOptions
from trainers.core.overwrites import Outputs
from trainers.core.rundir import CONFIG, RunState, new_run_dir
from trainers.train.faults import MemoryTips

if TYPE_CHECKING:
    from trainers.train.scoring import ScoreStart
    from trainers.train.saving import HealthCheck


@dataclass(frozen=True)
class Checks:
    """What a run is handed from above the methods (trainers/__main__.py builds it from trainers/preflight/)."""

    config: Callable[[TrainConfig], None]  # Validate's checks: raises ConfigError; torch-free
    outputs: Outputs  # every path a final save of the config's method writes (its rules' outputs)
    memory_tips: MemoryTips  # what the config's method could change to use less memory (its rules' memory_tips)
    health: "HealthCheck | None" = None  # every save's health check (trainers/health/report.py check_and_write)
    scores: "ScoreStart | None" = None  # every sampling's scores, the best save (trainers/scores/hook.py start_scores)


def run_method(method: str, config: Path | None, run_dir: Path | None, overrides: list[str], checks: Checks,
               print_only: bool = False) -> int:
    """Train `method` and return the exit status; every ending is recorded in the run directory."""
    try:
        return _run(method, config, run_dir, overrides, checks, print_only)
    finally:
        if "trainers.train.distributed" in sys.modules:  # not imported (nor torch) by a run refused at its start
            from trainers.train.distributed import release_process_group

            release_process_group()  # after the run's models are gone (see hold_process_group)


def _run(method: str, config: Path | None, run_dir: Path | None, overrides: list[str], checks: Checks,
         print_only: bool) -> int:
    from trainers.core.errors import EXIT_BAD_INPUT, BadInput, TrainingFailed, TrainingStopped
    from trainers.core.secrets import install_redaction

    install_redaction()
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    rank = int(os.environ.get("RANK", "0"))
    is_main = rank == 0
    warnings: list[str] = []
    life = Lifecycle(run_dir, is_main=is_main, rank=rank)
    try:
        cfg = load_config(method, config, overrides, warnings)
        if print_only:
            print(cfg.to_toml())
            return 0
        if run_dir is None:
            run_dir = new_run_dir(Path("runs"), SavingOptions.of(cfg).output_name)
            life = Lifecycle(run_dir, is_main=is_main, rank=rank)
        if is_main:
            run_dir.mkdir(parents=True, exist_ok=True)
            if not (run_dir / CONFIG).exists():
                cfg.save(run_dir / CONFIG)
            for w in warnings:
                life.events.warn(w)
        checks.config(cfg)  # the options, the dataset options and the model's files, before any heavy import
        final = _train(cfg, run_dir, life, checks)
    except TrainingStopped as stopped:
        life.stopped(str(stopped.path), str(stopped))
        print(str(stopped))
        return 0
    except BadInput as err:
        return life.failed(str(err), EXIT_BAD_INPUT, kind=type(err).__name__)
    except KeyboardInterrupt:
        return life.failed("stopped by the user (interrupt)", 130, state=RunState.STOPPED)
    except TrainingFailed as err:  # a known cause (NaN loss, out of memory, full disk): no traceback
        return life.failed(str(err), 1, kind=err.kind, **err.details)
    except Exception as err:  # noqa: BLE001 - report anything to the run directory, then fail
        traceback.print_exc()
        return life.failed(f"{type(err).__name__}: {err}", 1, kind=type(err).__name__,
                           trace=traceback.format_exc(limit=-8))
    life.finished(str(final))
    if is_main:
        print(f"done: {final}")
    return 0


def _train(cfg: TrainConfig, run_dir: Path, life: Lifecycle, checks: Checks) -> Path:
    from trainers.train.quiet import quiet_libraries

    quiet_libraries()  # before the libraries load and talk
    from trainers.train.loop import train
    from trainers.train.method import method_of
    from trainers.train.session import start_session

    method = method_of(cfg)
    session = start_session(cfg, run_dir, life, prepare=method.prepare, outputs=checks.outputs,
                            memory_tips=checks.memory_tips)
    return train(session, session.model.family.adapt_trainable(cfg, session, method.make_trainable(cfg, session)),
                 checks.health, checks.scores)
