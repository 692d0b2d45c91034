"""How much open pages slow a training run: the demo run's steps/s and the GUI process's CPU with 0 and N pages.

    .venv/bin/python benchmarks/pages_benchmark.py --pages 20 --seconds 60 --rounds 2

Starts `app.py --demo` in a temporary folder and a long demo training run in its runs folder, then alternates
phases without pages and with N headless chromium pages showing the run (0, N, 0, N, ...). Prints, per phase,
the run's steps/s and the share of a core the GUI process used, then the slowdown with pages. The pages' own
rendering runs in chromium on this machine too, so on a small machine part of the slowdown is the browser's;
the GUI process's CPU is the server's cost alone. `--pin-browsers` keeps them apart on one machine: the GUI and
the trainer run on the first half of the CPUs, chromium on the rest, so the slowdown is what the server's work
for the pages costs the run. Needs `bash setup.sh --dev` (playwright) and /usr/bin/chromium.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def last_step(run_dir: Path) -> int:
    try:
        lines = (run_dir / "events.jsonl").read_text(encoding="utf-8").splitlines()
    except OSError:
        return 0
    for line in reversed(lines):
        if line.startswith('{"type": "progress"'):
            return int(json.loads(line)["step"])
    return 0


def wait_for(predicate, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.5)
    raise SystemExit(f"timed out waiting for {what}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pages", type=int, default=20)
    parser.add_argument("--seconds", type=float, default=60, help="length of each phase")
    parser.add_argument("--rounds", type=int, default=2, help="(no pages, N pages) pairs")
    parser.add_argument("--pin-browsers", action="store_true",
                        help="GUI and trainer on the first half of the CPUs, chromium on the other half (Linux)")
    args = parser.parse_args()
    server_cpus, browser_cpus = cpu_halves() if args.pin_browsers else (None, None)
    pin = (lambda: os.sched_setaffinity(0, server_cpus)) if server_cpus else None
    from playwright.sync_api import sync_playwright

    env = {**os.environ, "HF_HUB_OFFLINE": "1", "GRADIO_ANALYTICS_ENABLED": "False"}
    with tempfile.TemporaryDirectory(prefix="atelier-pages-") as tmp:
        work = Path(tmp)
        port = free_port()
        app = start_demo_app(work, port, env, pin)
        run_dir = work / "runs" / "20260101-000000-lora-bench"
        trainer = None
        try:
            url = f"http://127.0.0.1:{port}/"
            trainer = start_long_run(url, work, run_dir, env, pin)
            results: list[tuple[int, float, float]] = []
            if browser_cpus:
                os.sched_setaffinity(0, browser_cpus)  # playwright's driver and chromium inherit it
                print(f"GUI and trainer on CPUs {sorted(server_cpus)}, chromium on {sorted(browser_cpus)}", flush=True)
            with sync_playwright() as pw:
                browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
                for _ in range(args.rounds):
                    for pages in (0, args.pages):
                        opened = [browser.new_page() for _ in range(pages)]
                        for page in opened:
                            page.goto(url)
                        for page in opened:
                            page.locator("#run-title").filter(has_text=run_dir.name).wait_for(timeout=120_000)
                        time.sleep(3)  # pages settle
                        step0, cpu0, t0 = last_step(run_dir), cpu_seconds(app.pid), time.monotonic()
                        time.sleep(args.seconds)
                        step1, cpu1, t1 = last_step(run_dir), cpu_seconds(app.pid), time.monotonic()
                        for page in opened:
                            page.close()
                        results.append((pages, (step1 - step0) / (t1 - t0), (cpu1 - cpu0) / (t1 - t0)))
                        print(f"{pages:3d} pages: {results[-1][1]:.3f} steps/s, GUI process {results[-1][2]:.1%} "
                              "of a core", flush=True)
                browser.close()
        finally:
            for proc in (trainer, app):
                if proc is not None and proc.poll() is None:
                    os.killpg(proc.pid, signal.SIGKILL)
    idle = [r for r in results if r[0] == 0]
    busy = [r for r in results if r[0] > 0]
    mean = lambda rows, i: sum(r[i] for r in rows) / len(rows)  # noqa: E731
    slowdown = 1 - mean(busy, 1) / mean(idle, 1)
    print(f"\nwith {args.pages} pages: training {slowdown:+.1%} slower; GUI process {mean(idle, 2):.1%} -> "
          f"{mean(busy, 2):.1%} of a core")
    return 0


def start_demo_app(work: Path, port: int, env: dict[str, str], pin: Callable[[], None] | None = None
                   ) -> subprocess.Popen:
    """`app.py --demo` on `port`, with its runs and presets folders in `work`."""
    return subprocess.Popen([sys.executable, "app.py", "--demo", "--headless", "--server-port", str(port),
                             "--runs-dir", str(work / "runs"), "--presets-dir", str(work / "presets")],
                            cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=open(work / "app.log", "wb"),
                            start_new_session=True, preexec_fn=pin)


def start_long_run(url: str, work: Path, run_dir: Path, env: dict[str, str],
                   pin: Callable[[], None] | None = None) -> subprocess.Popen:
    """Once the app at `url` answers and its demo model is built, a long demo run in `run_dir`, past its 5th step."""
    wait_for(lambda: _answers(url), 300, "the app")
    wait_for(lambda: (REPO / "demo" / "tiny-sd1" / "atelier_demo.json").exists(), 600,
             "the demo model")  # app.py prepares it behind the page
    config = work / "bench.toml"  # the demo, long, without samples or saves between steps
    config.write_text(_long_demo_config(work / "out"), encoding="utf-8")
    trainer = subprocess.Popen(
        [sys.executable, "-m", "trainers", "lora", "--config", str(config), "--run-dir", str(run_dir)],
        cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=open(work / "trainer.log", "wb"),
        start_new_session=True, preexec_fn=pin)
    wait_for(lambda: last_step(run_dir) >= 5 or trainer.poll() is not None, 600, "the first training steps")
    if trainer.poll() is not None:
        raise SystemExit(f"the trainer ended:\n{(work / 'trainer.log').read_text()[-2000:]}")
    return trainer


def _long_demo_config(out: Path) -> str:
    import tomllib

    import toml

    raw = tomllib.loads((REPO / "presets" / "demo.toml").read_text(encoding="utf-8"))
    raw["model"]["pretrained_model_name_or_path"] = str(REPO / "demo" / "tiny-sd1")
    raw["dataset"]["train_data_dir"] = str(REPO / "demo" / "data")
    raw["optimizer"]["max_train_epochs"] = 1000
    raw.pop("sampling")
    raw["saving"] = {"output_dir": str(out), "output_name": "bench"}
    return toml.dumps(raw)


def cpu_halves() -> tuple[set[int], set[int]]:
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        raise SystemExit("--pin-browsers needs at least 2 CPUs")
    half = len(cpus) // 2
    return set(cpus[:half]), set(cpus[half:])


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status == 200
    except OSError:
        return False


if __name__ == "__main__":
    sys.exit(main())
