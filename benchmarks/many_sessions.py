"""What many open sessions cost one GUI: the page's size and load time, the run panel's poll, and the run's speed.

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/many_sessions.py --sessions 20 --seconds 40 --rounds 2

Starts `app.py --demo` in a temporary folder and a long demo training run in its runs folder, then alternates
phases with one session and with N sessions (1, N, 1, N, ...). A session is what a browser tab does to the server
without the browser: it loads the page once, then asks for the run panel's refresh as the page's timer does, at
the interval each refresh answers with (as the page's config says: one POST outside Gradio's queue, or a queue
join and the answer read from the session's event stream), over plain HTTP to 127.0.0.1. Prints the page's size,
the page load times with N sessions loading at once, the poll's median and maximum latency per phase, the refresh
interval, the CPU the GUI process used in all and per poll (the part of the slowdown that does not depend on how
busy the machine is) and the run's steps/s per phase, then the slowdown with N sessions.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.pages_benchmark import cpu_halves, free_port, last_step, start_demo_app, start_long_run  # noqa: E402



def fetch(url: str, timeout_s: float = 120) -> tuple[bytes, float]:
    start = time.perf_counter()
    with urllib.request.urlopen(url, timeout=timeout_s) as response:
        body = response.read()
    return body, time.perf_counter() - start


def panel_poll(config: dict) -> tuple[int, int, int | None, bool]:
    """(fn_index, trigger id, where the timer is among its outputs, whether it goes through Gradio's queue) of the
    run panel's timer refresh: the tick whose outputs hold #run-title. The refresh answers with the timer's next
    interval, as a page's timer takes it."""
    ids = {c["props"].get("elem_id"): c["id"] for c in config["components"]}
    types = {c["id"]: c["type"] for c in config["components"]}
    for dep in config["dependencies"]:
        ticks = [t for t, event in dep["targets"] if event == "tick" and types.get(t) == "timer"]
        if ticks and ids["run-title"] in dep["outputs"]:
            outputs = dep["outputs"]
            queued = dep.get("queue") is not False and config.get("enable_queue", True)
            return dep["id"], ticks[0], outputs.index(ticks[0]) if ticks[0] in outputs else None, queued
    raise SystemExit("no run panel poll in the page's config")


class Session(threading.Thread):
    """One page: polls the run panel every `every_s` until `stop` is set, keeping each poll's latency."""

    def __init__(self, base: str, fn_index: int, trigger: int, timer_at: int | None, queued: bool, run_id: str,
                 stop: threading.Event, every_s: float = 1.0) -> None:
        super().__init__(daemon=True)
        self.base, self.fn_index, self.trigger, self.timer_at, self.run_id = base, fn_index, trigger, timer_at, run_id
        self.queued = queued
        self.stop, self.every_s = stop, every_s
        self.hash = uuid.uuid4().hex[:11]
        self.first: float | None = None  # the session's first poll: Gradio sets the session up
        self.latencies: list[float] = []
        self.errors = 0
        self.first_error = ""

    def poll(self) -> float:
        start = time.perf_counter()
        body = json.dumps({"data": [self.run_id, None], "fn_index": self.fn_index, "session_hash": self.hash,
                           "event_data": None, "trigger_id": self.trigger}).encode()
        output = self._queued(body) if self.queued else self._direct(body)
        took = time.perf_counter() - start
        if self.timer_at is not None:
            timer = output["data"][self.timer_at]
            if isinstance(timer, dict) and isinstance(timer.get("value"), (int, float)):
                self.every_s = float(timer["value"])
        return took

    def _direct(self, body: bytes) -> dict:
        """An event outside the queue, as the page sends it: one POST answered with the outputs."""
        request = urllib.request.Request(f"{self.base}gradio_api/run/predict", body,
                                         {"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=120) as answer:
                return json.loads(answer.read())
        except urllib.error.HTTPError as error:
            raise RuntimeError(f"HTTP {error.code}: {error.read()[:200]!r}") from None

    def _queued(self, body: bytes) -> dict:
        """An event through Gradio's queue: join, then read the answer from the session's event stream."""
        request = urllib.request.Request(f"{self.base}gradio_api/queue/join", body,
                                         {"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=120) as answer:
            event_id = json.loads(answer.read())["event_id"]
        with urllib.request.urlopen(f"{self.base}gradio_api/queue/data?session_hash={self.hash}",
                                    timeout=120) as stream:
            for raw in stream:
                line = raw.decode("utf-8", "replace").strip()
                if not line.startswith("data:"):
                    continue
                message = json.loads(line[5:])
                if message.get("event_id") == event_id and message.get("msg") == "process_completed":
                    if not message.get("success", False):
                        raise RuntimeError(str(message.get("output"))[:200])
                    return message["output"]
        raise RuntimeError("the event stream ended before the poll's answer")

    def run(self) -> None:
        while not self.stop.is_set():
            started = time.monotonic()
            try:
                took = self.poll()
                if self.first is None:
                    self.first = took
                else:
                    self.latencies.append(took)
            except (OSError, RuntimeError, ValueError) as error:
                self.errors += 1
                self.first_error = self.first_error or f"{type(error).__name__}: {error}"
            self.stop.wait(max(0.0, self.every_s - (time.monotonic() - started)))


def cpu_s(pid: int) -> float:
    """CPU seconds process `pid` has used (user + system, its own threads: not its children's)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _polls(sessions: list[Session]) -> int:
    return sum(len(s.latencies) + (s.first is not None) for s in sessions)


def phase(base: str, poll: tuple[int, int, int | None, bool], run_dir: Path, sessions: int, seconds: float,
          gui_pid: int) -> dict:
    stop = threading.Event()
    pages: list[float] = []

    def load_page() -> None:
        pages.append(fetch(base)[1])

    loaders = [threading.Thread(target=load_page) for _ in range(sessions)]
    for thread in loaders:  # every session loads the page first, all at once
        thread.start()
    for thread in loaders:
        thread.join()
    polling = [Session(base, *poll, run_dir.name, stop) for _ in range(sessions)]
    for session in polling:
        session.start()
    time.sleep(3)  # the sessions settle
    step0, t0, cpu0, polls0 = last_step(run_dir), time.monotonic(), cpu_s(gui_pid), _polls(polling)
    time.sleep(seconds)
    step1, t1, cpu1, polls1 = last_step(run_dir), time.monotonic(), cpu_s(gui_pid), _polls(polling)
    stop.set()
    for session in polling:
        session.join(timeout=130)
    latencies = [x for s in polling for x in s.latencies]
    firsts = [s.first for s in polling if s.first is not None]
    return {"sessions": sessions, "steps_per_s": (step1 - step0) / (t1 - t0), "gui_cores": (cpu1 - cpu0) / (t1 - t0),
            "gui_ms_per_poll": 1000 * (cpu1 - cpu0) / max(1, polls1 - polls0),  # the idle GUI's share included
            "poll_median_s": statistics.median(latencies) if latencies else float("nan"),
            "poll_max_s": max(latencies, default=float("nan")), "polls": len(latencies),
            "first_poll_max_s": max(firsts, default=float("nan")),
            "errors": sum(s.errors for s in polling), "every_s": max(s.every_s for s in polling),
            "first_error": next((s.first_error for s in polling if s.first_error), ""), "page_median_s": statistics.median(pages),
            "page_max_s": max(pages)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sessions", type=int, default=20)
    parser.add_argument("--seconds", type=float, default=40, help="length of each phase")
    parser.add_argument("--rounds", type=int, default=2, help="(1 session, N sessions) pairs")
    parser.add_argument("--pin", action="store_true",
                        help="the GUI and the trainer on the first half of the CPUs, the sessions (this process) on "
                             "the rest, as browsers on other machines would be")
    args = parser.parse_args()
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "GRADIO_ANALYTICS_ENABLED": "False"}
    with tempfile.TemporaryDirectory(prefix="atelier-sessions-") as tmp:
        work = Path(tmp)
        port = free_port()
        server_cpus, session_cpus = cpu_halves() if args.pin else (None, None)
        pin = (lambda: os.sched_setaffinity(0, server_cpus)) if server_cpus else None
        if session_cpus:
            os.sched_setaffinity(0, session_cpus)
        app = start_demo_app(work, port, env, pin)
        run_dir = work / "runs" / "20260101-000000-lora-bench"
        trainer = None
        results = []
        try:
            base = f"http://127.0.0.1:{port}/"
            trainer = start_long_run(base, work, run_dir, env, pin)
            page, _ = fetch(base)
            poll = panel_poll(json.loads(fetch(f"{base}config")[0]))
            print(f"page: {len(page) / 1e6:.2f} MB", flush=True)
            for _ in range(args.rounds):
                for sessions in (1, args.sessions):
                    results.append(phase(base, poll, run_dir, sessions, args.seconds, app.pid))
                    print(json.dumps({k: round(v, 3) if isinstance(v, float) else v
                                      for k, v in results[-1].items()}), flush=True)
        finally:
            for proc in (trainer, app):
                if proc is not None and proc.poll() is None:
                    os.killpg(proc.pid, signal.SIGKILL)
    print("\n| sessions | page load median / max | first poll max | poll median / max | refresh every | failed polls "
          "| GUI CPU | GUI CPU a poll | steps/s |\n|---|---|---|---|---|---|---|---|---|")
    for r in results:
        print(f"| {r['sessions']} | {r['page_median_s']:.2f} / {r['page_max_s']:.2f} s | {r['first_poll_max_s']:.2f} s | "
              f"{r['poll_median_s']:.3f} / {r['poll_max_s']:.3f} s | {r['every_s']:.1f} s | {r['errors']} | "
              f"{r['gui_cores']:.3f} cores | {r['gui_ms_per_poll']:.1f} ms | {r['steps_per_s']:.2f} |")
    one = [r["steps_per_s"] for r in results if r["sessions"] == 1]
    many = [r["steps_per_s"] for r in results if r["sessions"] > 1]
    print(f"\npage {len(page) / 1e6:.2f} MB; with {args.sessions} sessions training is "
          f"{1 - statistics.mean(many) / statistics.mean(one):+.1%} slower than with one")
    failed = next((r["first_error"] for r in results if r["errors"]), "")
    if failed:  # a failing poll is answered at once: its latency would make the page look fast
        print(f"\nPOLLS FAILED ({sum(r['errors'] for r in results)}); the first: {failed}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
