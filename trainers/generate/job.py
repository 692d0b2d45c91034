"""Running a generation job: workers (one full pipeline per GPU) take work items from a shared queue.

The coordinator (this process) owns the queue: a worker that finishes an item gets the next one,
preferably of the variant (LoRA set) it already has loaded. It writes every event, so events.jsonl
has one writer. A worker that fails (an exception, or its process dies) is reported as a warning
and its unfinished item goes back to the front of the queue for the others; the job fails only
when no worker is left. One worker runs in this process (no start-up cost); more are spawned.
"""
from __future__ import annotations

import multiprocessing as mp
import os
import queue
import sys
import time
import traceback
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainers.core import events as ev
from trainers.core.job import JobStopped, stop_requested
from trainers.generate.options import GenerateConfig
from trainers.generate.plan import Plan, WorkItem, build_plan, resolve_seed

POLL_S = 0.5


class GenerationFailed(RuntimeError):
    """No worker is left to finish the job; the message says what happened to each."""


class GenerationStopped(JobStopped):
    """The user asked the job to stop; the images made so far are kept."""


@dataclass
class JobResult:
    images: list[Path]  # in the job's order (variant, prompt, index), whatever the workers
    output: Path  # the images folder, or the grid
    prompt_encodes: int
    failed_workers: list[str] = field(default_factory=list)
    grid: Path | None = None


def worker_devices(cfg: GenerateConfig) -> list[str]:
    """One device per worker: every listed (or, with auto, every visible) GPU once; the CPU num_workers times."""
    import torch

    wanted = cfg.devices.strip().lower()
    if wanted == "auto":
        count = torch.cuda.device_count()
        if count:
            return [f"cuda:{i}" for i in range(count)]
        wanted = "cpu"
    if wanted == "cpu":
        return ["cpu"] * max(1, cfg.num_workers)
    ids = [int(i) for i in wanted.replace(" ", "").split(",")]
    count = torch.cuda.device_count()
    missing = [i for i in ids if i >= count]
    if missing:
        raise GenerationFailed(f"devices: GPU {', '.join(map(str, missing))} not found ({count} visible); "
                               "write auto, cpu, or ids below the count")
    return [f"cuda:{i}" for i in dict.fromkeys(ids)]


class _Queue:
    """The pending work items; a worker gets one of the variant it has loaded when there is one."""

    def __init__(self, items: list[WorkItem]) -> None:
        self.pending: deque[WorkItem] = deque(items)

    def take(self, variant: int | None) -> WorkItem | None:
        if not self.pending:
            return None
        for i, item in enumerate(self.pending):
            if item.variant == variant:
                del self.pending[i]
                return item
        return self.pending.popleft()

    def give_back(self, item: WorkItem) -> None:
        self.pending.appendleft(item)


class _Meter:
    """Images/s for the whole job, wall-clock over the last `window` finished items."""

    def __init__(self, total: int, window: int = 20) -> None:
        self.total, self.done = total, 0
        self.marks: deque[tuple[float, int]] = deque(maxlen=window + 1)

    def start(self) -> None:
        if not self.marks:
            self.marks.append((time.perf_counter(), 0))

    def add(self, images: int, seconds: float) -> ev.GenerateProgress:
        self.done += images
        self.marks.append((time.perf_counter(), images))
        elapsed = self.marks[-1][0] - self.marks[0][0]
        rate = sum(n for _, n in list(self.marks)[1:]) / elapsed if elapsed > 0 else 0.0
        remaining = self.total - self.done
        return ev.GenerateProgress(done=self.done, total=self.total, images_per_s=round(rate, 4),
                                   eta_s=round(remaining / rate, 1) if rate > 0 else None, seconds=round(seconds, 3))


def run_job(cfg: GenerateConfig, job_dir: Path | None, events: ev.EventWriter | None = None) -> JobResult:
    """Render every image of the job; write events to `job_dir` (when given). Returns what was made."""
    events = events or ev.EventWriter(job_dir)
    seed = resolve_seed(cfg.seed)
    out_dir = Path(cfg.output_dir).expanduser() if cfg.output_dir.strip() else \
        (Path(job_dir) if job_dir is not None else Path.cwd()) / "images"
    out_dir.mkdir(parents=True, exist_ok=True)
    plan = build_plan(cfg, out_dir, seed)
    devices = worker_devices(cfg)[:max(1, len(plan.items))]
    events.emit(ev.JobStart(mode=cfg.mode, seed=seed, total_images=plan.total_images, items=len(plan.items),
                            prompts=len(plan.prompts), variants=[v.label for v in plan.variants], workers=devices,
                            out_dir=str(out_dir)))
    meter = _Meter(plan.total_images)
    run = _run_in_process if len(devices) == 1 else _run_workers
    encodes, failed = run(cfg, plan, devices, events, meter, job_dir)
    images = [Path(image.path) for item in plan.items for image in item.images]
    result = JobResult(images, out_dir, encodes, failed)
    if cfg.mode == "compare":
        from trainers.generate.grid import save_compare_grid

        result.grid = save_compare_grid(cfg, plan, job_dir or out_dir, events)
        result.output = result.grid
    return result


def _announce(events: ev.EventWriter, meter: _Meter, plan: Plan, item: WorkItem, worker: int, seconds: float) -> None:
    variant = plan.variants[item.variant]
    for image in item.images:
        events.emit(ev.Image(path=image.path, prompt=item.prompt.prompt, negative=item.prompt.negative,
                             prompt_index=item.prompt.index, index=image.index, seed=image.seed, order=image.order,
                             variant=item.variant, label=variant.label, worker=worker))
    events.emit(meter.add(len(item.images), seconds))


def _cpu_threads(cfg: GenerateConfig, devices: list[str]) -> int:
    cpu_workers = sum(d == "cpu" for d in devices) or 1
    return cfg.cpu_threads or max(1, len(os.sched_getaffinity(0)) // cpu_workers)


def _run_in_process(cfg: GenerateConfig, plan: Plan, devices: list[str], events: ev.EventWriter, meter: _Meter,
                    job_dir: Path | None) -> tuple[int, list[str]]:
    import torch

    from trainers.generate.renderer import Renderer

    threads = torch.get_num_threads()
    try:
        if devices[0] == "cpu":
            torch.set_num_threads(_cpu_threads(cfg, devices))
            torch.set_flush_denormal(True)
        renderer = Renderer(cfg, devices[0], plan.variants)
        if plan.items:
            renderer.use_variant(plan.items[0].variant)  # load first: images/s counts rendering only
        work = _Queue(plan.items)
        meter.start()
        while (item := work.take(renderer.variant)) is not None:
            if stop_requested(job_dir):
                raise GenerationStopped(f"stopped with {meter.done} of {meter.total} images made")
            started = time.perf_counter()
            renderer.render(item)
            _announce(events, meter, plan, item, 0, time.perf_counter() - started)
        return renderer.encodes, []
    finally:
        torch.set_num_threads(threads)


def worker_main(wid: int, device: str, cfg_values: dict[str, Any], plan: Plan, threads: int,
                commands: Any, results: Any) -> None:
    """A worker process: load the pipeline, then render what the coordinator sends until it sends None."""
    try:
        import torch

        from trainers.generate.renderer import Renderer

        if device == "cpu":
            torch.set_num_threads(threads)
            torch.set_flush_denormal(True)
        else:
            torch.cuda.set_device(torch.device(device))
        renderer = Renderer(GenerateConfig(cfg_values), device, plan.variants)
        if not all(v.model for v in plan.variants):
            renderer.load(renderer.cfg.model)
        results.put(("ready", wid, None))
        while (item := commands.get()) is not None:
            started = time.perf_counter()
            renderer.render(item)
            results.put(("done", wid, (item.id, time.perf_counter() - started)))
        results.put(("bye", wid, renderer.encodes))
    except BaseException as err:  # noqa: BLE001 - everything is reported to the coordinator
        results.put(("failed", wid, (f"{type(err).__name__}: {err}", traceback.format_exc(limit=-6))))


@dataclass
class _Worker:
    wid: int
    device: str
    process: Any
    commands: Any
    holding: WorkItem | None = None
    state: str = "starting"  # starting, working, idle, finished, failed


def _run_workers(cfg: GenerateConfig, plan: Plan, devices: list[str], events: ev.EventWriter, meter: _Meter,
                 job_dir: Path | None) -> tuple[int, list[str]]:
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    threads = _cpu_threads(cfg, devices)
    workers = []
    for wid, device in enumerate(devices):
        commands = ctx.Queue()
        process = ctx.Process(target=worker_main, name=f"atelier-generate-{wid}", daemon=True,
                              args=(wid, device, cfg.values, plan, threads, commands, results))
        process.start()
        workers.append(_Worker(wid, device, process, commands))
    work, by_id = _Queue(plan.items), {item.id: item for item in plan.items}
    variant_of: dict[int, int | None] = {w.wid: None for w in workers}
    encodes, failed = 0, []

    def dispatch(w: _Worker) -> None:
        item = work.take(variant_of[w.wid])
        w.holding, w.state = item, "working" if item else "idle"
        if item is not None:
            variant_of[w.wid] = item.variant
            w.commands.put(item)

    def fail(w: _Worker, message: str, trace: str = "") -> None:
        w.state = "failed"
        lost = w.holding
        w.holding = None
        if lost is not None:
            work.give_back(lost)
        failed.append(f"worker {w.wid} ({w.device}): {message}")
        if trace:
            print(f"worker {w.wid} on {w.device} failed:\n{trace}", file=sys.stderr, flush=True)
        events.warn(f"worker {w.wid} on {w.device} failed: {message}; "
                    f"{'its images go to the other workers' if lost else 'the others carry on'}")
        for idle in [o for o in workers if o.state == "idle"]:  # the given-back item needs a taker
            dispatch(idle)

    try:
        while True:
            if stop_requested(job_dir):
                raise GenerationStopped(f"stopped with {meter.done} of {meter.total} images made")
            alive = [w for w in workers if w.state in ("starting", "working", "idle")]
            if not alive:
                raise GenerationFailed("every worker failed:\n" + "\n".join(failed))
            if not work.pending and not any(w.state == "working" for w in workers):
                break  # all done; workers still loading are told to stop below
            try:
                kind, wid, payload = results.get(timeout=POLL_S)
            except queue.Empty:
                for w in alive:
                    if not w.process.is_alive():
                        code = w.process.exitcode
                        why = "killed (SIGKILL): likely out of memory" if code in (-9, 137) else f"exited with {code}"
                        fail(w, why)
                continue
            w = workers[wid]
            if kind == "ready":
                meter.start()
                dispatch(w)
            elif kind == "done":
                item_id, seconds = payload
                w.holding = None
                _announce(events, meter, plan, by_id[item_id], wid, seconds)
                dispatch(w)
            elif kind == "failed" and w.state != "failed":  # (its death may have been noticed first)
                fail(w, *payload)
            elif kind == "bye":
                encodes += payload
                w.state = "finished"
        for w in workers:
            if w.state == "starting":  # still loading, nothing left for it
                w.process.terminate()
        waiting = [w for w in workers if w.state == "idle"]
        for w in waiting:
            w.commands.put(None)
        deadline = time.monotonic() + 30
        while any(w.state == "idle" for w in waiting) and time.monotonic() < deadline:
            try:
                kind, wid, payload = results.get(timeout=POLL_S)
            except queue.Empty:
                continue
            if kind == "bye":
                encodes += payload
                workers[wid].state = "finished"
        return encodes, failed
    finally:
        for w in workers:
            if w.process.is_alive():
                w.commands.put(None)
        for w in workers:
            w.process.join(timeout=5)
            if w.process.is_alive():
                w.process.terminate()
                w.process.join(timeout=5)
