"""How the run panel copes with a long run: 100,000 progress events and a 200,000-line log.

    python benchmarks/gui_load.py     # prints one JSON line: seconds for the first and next refresh, memory
"""
from __future__ import annotations

import json
import resource
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gui.run_files import RunWatcher  # noqa: E402
from gui.run_panel import render  # noqa: E402


def main(events: int = 100_000, log_lines: int = 200_000) -> None:
    run = Path(tempfile.mkdtemp(prefix="atelier-load-"))
    (run / "status.json").write_text(json.dumps({"state": "finished"}))
    with open(run / "events.jsonl", "w") as fh:
        for step in range(1, events + 1):
            fh.write(json.dumps({"type": "progress", "time": step, "step": step, "total_steps": events, "epoch": 1,
                                 "total_epochs": 1, "loss": 0.1, "loss_smoothed": 0.1, "lr": 1e-4, "it_per_s": 2.0,
                                 "images_per_s": 4.0, "eta_s": 1.0, "peak_mem_gb": 1.0, "peak_mem_kind": "cuda",
                                 "data_share": 0.01}) + "\n")
    with open(run / "train.log", "w") as fh:
        for i in range(log_lines):
            fh.write(f"line {i} of the training log, with some text to make it realistic\n")
    watcher = RunWatcher(run)
    t0 = time.perf_counter()
    render(watcher.refresh())
    first = time.perf_counter() - t0
    with open(run / "events.jsonl", "a") as fh:
        fh.write(json.dumps({"type": "done", "output": "/x.safetensors"}) + "\n")
    t0 = time.perf_counter()
    view = watcher.refresh()
    render(view)
    again = time.perf_counter() - t0
    print(json.dumps({"events": events, "log_lines": log_lines, "first_refresh_s": round(first, 3),
                      "next_refresh_s": round(again, 4), "chart_points": len(view.losses),
                      "log_lines_kept": len(view.log_tail),
                      "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)}))


if __name__ == "__main__":
    main()
