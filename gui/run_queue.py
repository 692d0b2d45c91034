"""The run queue: Start while the GPUs are busy queues the run (or caption or mask job) instead of refusing it.

A queued run (or job) is a run folder like any other (config.toml, status.json with state "queued" and a
position), so the queue survives a GUI restart as runs do. The scheduler starts, in queue order, each queued run
whose GPUs are free and not wanted by a run before it; a run that can no longer load its config is marked failed
with the reason.
"""
from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

from gui.jobs import DATASET_METHOD, TOOLS_METHOD, JobError, JobManager, gpu_set, job_device_ids, tool_is_light
from gui.run_files import list_runs
from trainers.caption.options import JobConfig
from trainers.core.options import ConfigError, TrainConfig, load_config
from trainers.core.rundir import CONFIG, RunState, read_status, update_status
from trainers.tools.options import ToolConfig


class RunQueue:
    def __init__(self, jobs: JobManager) -> None:
        self.jobs = jobs
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def submit(self, cfg: TrainConfig) -> tuple[Path, str]:
        """Start `cfg` now, or queue it when its GPUs are busy: (run folder, what to tell the user)."""
        with self._lock:
            busy = self.jobs.busy_with(gpu_set(cfg.values))
            if busy is None and not self.queued():
                run_dir = self.jobs.start(cfg)
                return run_dir, f"Started `{run_dir.name}`"
            run_dir = self.enqueue(cfg)
        return run_dir, self._queued_text(run_dir, busy)

    def submit_dataset_job(self, cfg: JobConfig) -> tuple[Path, str]:
        """Start a caption or mask job now, or queue it as `submit` queues a run: (job folder, what to tell them)."""
        with self._lock:
            busy = self.jobs.busy_with(set(job_device_ids(cfg).split(",")))
            if busy is None and not self.queued():
                job_dir = self.jobs.start_dataset_job(cfg)
                return job_dir, f"Started {cfg.verb} `{job_dir.name}`"
            job_dir = self.jobs.queue_job(cfg, queue_position=time.time())
        return job_dir, self._queued_text(job_dir, busy)

    def submit_tool(self, cfg: ToolConfig) -> tuple[Path, str]:
        """Start a tools job now (a light one always: see tool_is_light), or queue a heavy one, which loads whole
        models, while a run uses its device: (job folder, what to tell the user)."""
        with self._lock:
            busy = None if tool_is_light(cfg) else self.jobs.busy_with(set(job_device_ids(cfg).split(",")))
            if busy is None and (tool_is_light(cfg) or not self.queued()):
                job_dir = self.jobs.start_tool(cfg)
                return job_dir, f"Started tools {cfg.verb} `{job_dir.name}`"
            job_dir = self.jobs.queue_job(cfg, queue_position=time.time())
        return job_dir, (f"{self._queued_text(job_dir, busy)} tools {cfg.verb} loads whole models, so it waits for "
                         "the device instead of sharing it with a run; inspect, resize, convert of a LoRA and merges "
                         "of LoRAs into one LoRA start at once.")

    def _queued_text(self, run_dir: Path, busy: Path | None) -> str:
        waits_for = f"run `{busy.name}`" if busy is not None else "the runs queued before it"
        return (f"Queued `{run_dir.name}` (position {self.queued().index(run_dir) + 1}): it starts by itself when "
                f"{waits_for} is done. Reorder or cancel it on the Runs tab.")

    def waits_for(self, run_dir: Path) -> str:
        """What a queued run waits behind now: the nearest run queued before it that wants its devices, else the
        active run on them ("" when nothing holds it: the scheduler starts it within seconds)."""
        wanted = gpu_set(read_status(run_dir))
        order = self.queued()
        before = order[:order.index(run_dir)] if run_dir in order else []
        ahead = [r for r in before if wanted & gpu_set(read_status(r))]
        if ahead:
            return f"`{ahead[-1].name}` (queued)"
        busy = self.jobs.busy_with(wanted)
        return f"`{busy.name}` (running)" if busy is not None else ""

    def enqueue(self, cfg: TrainConfig, **status: Any) -> Path:
        """A run folder for `cfg`, queued after the runs queued before it; `status`: more status.json keys."""
        run_dir = self.jobs.new_run_dir(cfg)
        run_dir.mkdir(parents=True)
        cfg.save(run_dir / CONFIG)
        update_status(run_dir, state=RunState.QUEUED, method=cfg.method, created=time.time(),
                      queue_position=time.time(), gpu_ids=cfg.gpu_ids, num_processes=cfg.num_processes,
                      output_dir=cfg.output_dir, output_name=cfg.output_name, **status)
        return run_dir

    def queued(self) -> list[Path]:
        """Queued runs, first to start first."""
        runs = [r.path for r in list_runs(self.jobs.runs_dir) if r.state == RunState.QUEUED]
        return sorted(runs, key=lambda r: float(read_status(r).get("queue_position", 0)))

    def move(self, run_dir: Path, steps: int) -> None:
        """Move a queued run `steps` places (negative: sooner)."""
        with self._lock:
            order = self.queued()
            if run_dir not in order:
                raise JobError(f"{run_dir.name} is not queued.")
            i = order.index(run_dir)
            j = max(0, min(len(order) - 1, i + steps))
            order.insert(j, order.pop(i))
            for position, run in enumerate(order):
                update_status(run, queue_position=float(position))

    def cancel(self, run_dir: Path) -> None:
        with self._lock:
            if RunState.of(read_status(run_dir).get("state")) != RunState.QUEUED:
                raise JobError(f"{run_dir.name} is not queued (stop a running run with Stop).")
            update_status(run_dir, state=RunState.STOPPED, finished=time.time(),
                          message="removed from the queue before it started")

    def start_ready(self) -> list[Path]:
        """Start, in order, each queued run whose GPUs are free and not wanted by a queued run before it."""
        started = []
        with self._lock:
            claimed: set[str] = set()
            for run_dir in self.queued():
                status = read_status(run_dir)
                wanted = gpu_set(status)
                if not wanted & claimed and self.jobs.busy_with(wanted) is None:
                    if self._start(run_dir, status.get("method", "")):
                        started.append(run_dir)
                claimed |= wanted
        return started

    def _start(self, run_dir: Path, method: str) -> bool:
        try:
            if method in (DATASET_METHOD, TOOLS_METHOD):
                self.jobs.launch_queued_job(run_dir)
            else:
                self.jobs.launch_in(run_dir, load_config(method, run_dir / CONFIG))
        except (ConfigError, JobError, OSError, KeyError) as err:
            update_status(run_dir, state=RunState.FAILED, finished=time.time(), exit_code=2,
                          message=f"could not start from the queue: {err}")
            return False
        return True

    def run_scheduler(self, every_s: float = 2.0) -> None:
        """Start queued runs in the background as GPUs free up (once per GUI process)."""
        if self._thread is not None:
            return

        def loop() -> None:
            while True:
                try:
                    self.start_ready()
                except Exception as err:  # noqa: BLE001 - the scheduler must outlive one bad run folder
                    print(f"run queue: {type(err).__name__}: {err}", flush=True)
                time.sleep(every_s)

        self._thread = threading.Thread(target=loop, name="run-queue", daemon=True)
        self._thread.start()
