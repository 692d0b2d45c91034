"""Test-only fault injection and counting, loaded into trainer and worker processes by the tests.

Tests put this folder on PYTHONPATH (see tests/helpers.py: `hook_env`); Python imports it at start-up, and
it patches Atelier's modules as they are imported. Production code carries no test hooks.

- ATELIER_TEST_FAIL_RANK_AT_STEP="RANK:STEP": that rank raises at that optimizer step.
- ATELIER_TEST_FAIL_WORKER=ID: generation worker ID raises on its first work item (the others wait for it).
- ATELIER_TEST_FAKE_FAMILY=1: the tests' fake model family (tests/fake_family/) is one of the families.
- ATELIER_TEST_COUNT_COLLECTIVES=FILE: torch.distributed collectives per optimizer step (those since the
  previous step's report) and the bytes handed to them, one JSON line per rank and step appended to FILE
  (also read by benchmarks/collectives_benchmark.py).
"""
from __future__ import annotations

import importlib.abc
import json
import os
import sys
from typing import Any, Callable

_PATCHES: dict[str, Callable[[Any], None]] = {}  # module name -> patch applied right after it is imported


class _PatchAfterImport(importlib.abc.MetaPathFinder):
    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name not in _PATCHES:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                break
        else:
            return None
        run = spec.loader.exec_module

        def exec_module(module: Any) -> None:
            run(module)
            _PATCHES.pop(name)(module)

        spec.loader.exec_module = exec_module
        return spec


def _rank() -> int:
    return int(os.environ.get("RANK", "0"))


def _wrap_report_step(reporting: Any, before: Callable[[int], None]) -> None:
    original = reporting.Reporter.step

    def step(self: Any, step: int, *args: Any, **kwargs: Any) -> Any:
        before(step)
        return original(self, step, *args, **kwargs)

    reporting.Reporter.step = step


class CollectiveCounter:
    """Counts torch.distributed collective calls, DDP's gradient buckets included (they go through Atelier's
    Python comm hook, which calls torch.distributed.all_reduce)."""

    NAMES = ("all_reduce", "broadcast", "all_gather", "all_gather_into_tensor", "reduce_scatter",
             "reduce_scatter_tensor", "barrier", "all_gather_object", "broadcast_object_list", "gather", "scatter",
             "all_to_all", "reduce")

    def __init__(self) -> None:
        self.count = 0
        self.bytes = 0  # what this rank hands to its collectives (the last tensor argument: all_gather's input)
        self._depth = 0
        import torch.distributed as dist

        for name in self.NAMES:
            original = getattr(dist, name, None)
            if original is not None:
                setattr(dist, name, self._wrap(original))

    def _wrap(self, original: Any) -> Any:
        def counted(*args: Any, **kwargs: Any) -> Any:
            self.count += self._depth == 0  # broadcast_object_list calls broadcast: count the outer call once
            self.bytes += _payload(args) if self._depth == 0 else 0
            self._depth += 1
            try:
                return original(*args, **kwargs)
            finally:
                self._depth -= 1

        return counted

    def take(self) -> tuple[int, int]:
        taken = (self.count, self.bytes)
        self.count = self.bytes = 0
        return taken


def _payload(args: tuple) -> int:
    import torch

    def size(arg: Any) -> int:
        if isinstance(arg, torch.Tensor):
            return arg.numel() * arg.element_size()
        if isinstance(arg, (list, tuple)):
            return sum(size(a) for a in arg)
        return 0

    sizes = [size(a) for a in args if size(a)]
    return sizes[-1] if sizes else 0


def _count_collectives(path: str) -> Callable[[Any], None]:
    def patch(reporting: Any) -> None:
        counter = CollectiveCounter()

        def record(step: int) -> None:
            count, sent = counter.take()
            with open(path, "a", encoding="utf-8") as fh:
                fh.write(json.dumps({"rank": _rank(), "step": step, "collectives": count, "bytes": sent}) + "\n")

        _wrap_report_step(reporting, record)

    return patch


def _fail_rank(spec: str) -> Callable[[Any], None]:
    rank, _, at = spec.partition(":")

    def patch(reporting: Any) -> None:
        def fail(step: int) -> None:
            if _rank() == int(rank) and step == int(at):
                raise RuntimeError(f"injected failure on rank {rank} at step {step} (ATELIER_TEST_FAIL_RANK_AT_STEP)")

        _wrap_report_step(reporting, fail)

    return patch


def _fail_worker(wid: str) -> Callable[[Any], None]:
    def patch(job: Any) -> None:
        original = job.worker_main

        def worker_main(worker: int, *args: Any, **kwargs: Any) -> Any:
            import tempfile
            import time
            from pathlib import Path

            from trainers.generate.renderer import Renderer

            failed = Path(tempfile.gettempdir()) / f"atelier-failed-worker-{os.getppid()}"  # one job's workers
            plain = Renderer.render
            if str(worker) == wid:
                def render(self: Any, item: Any) -> Any:
                    failed.touch()
                    raise RuntimeError(f"injected failure (ATELIER_TEST_FAIL_WORKER={wid})")
            else:
                def render(self: Any, item: Any) -> Any:
                    # the others wait for the failure (60 s at most): a fast worker would else render every item
                    # before the failing one has loaded its pipeline
                    deadline = time.monotonic() + 60
                    while not failed.exists() and time.monotonic() < deadline:
                        time.sleep(0.05)
                    return plain(self, item)

            Renderer.render = render
            return original(worker, *args, **kwargs)

        job.worker_main = worker_main

    return patch


def _add_fake_family(rules: Any) -> None:
    from tests.fake_family.registration import add_to

    add_to(rules)


def _install() -> None:
    reporting: list[Callable[[Any], None]] = []
    if os.environ.get("ATELIER_TEST_COUNT_COLLECTIVES"):
        reporting.append(_count_collectives(os.environ["ATELIER_TEST_COUNT_COLLECTIVES"]))
    if os.environ.get("ATELIER_TEST_FAIL_RANK_AT_STEP"):
        reporting.append(_fail_rank(os.environ["ATELIER_TEST_FAIL_RANK_AT_STEP"]))
    if reporting:
        _PATCHES["trainers.train.reporting"] = lambda module: [patch(module) for patch in reporting]
    if os.environ.get("ATELIER_TEST_FAIL_WORKER"):
        _PATCHES["trainers.generate.job"] = _fail_worker(os.environ["ATELIER_TEST_FAIL_WORKER"])
    if os.environ.get("ATELIER_TEST_FAKE_FAMILY"):
        _PATCHES["trainers.models.rules"] = _add_fake_family
    if _PATCHES:
        sys.meta_path.insert(0, _PatchAfterImport())


_install()
