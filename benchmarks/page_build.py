"""What the path fields' Browse lists cost the page: build time, components, events and config size, for the page
without Browse, with a list per path field, and with the one shared list (what the page uses).

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/page_build.py    # one JSON line per way, best of --rounds builds

The config is what the browser downloads and renders on every page load: its components and events are the cost.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import gradio as gr  # noqa: E402

import gui.dataset_tab  # noqa: E402
import gui.folder_browser  # noqa: E402
import gui.forms  # noqa: E402
import gui.page  # noqa: E402
from gui.jobs import JobManager  # noqa: E402
from gui.presets import Presets  # noqa: E402
from gui.run_files import Watchers  # noqa: E402


def _plain_textbox(kind: str, **textbox: Any) -> gr.Textbox:
    return gr.Textbox(**textbox)


WAYS: dict[str, dict[tuple[Any, str], Any]] = {  # (module, name) -> what replaces it while building
    "no_browse": {(gui.forms, "browsable_textbox"): _plain_textbox, (gui.dataset_tab, "browsable_textbox"): _plain_textbox},
    "list_per_field": {(gui.page, "browse_panel"): contextlib.nullcontext},
    "shared_list": {},
}


def measure(build: Callable[[], gr.Blocks], replaced: dict[tuple[Any, str], Any]) -> tuple[float, dict]:
    saved = {key: getattr(*key) for key in replaced}
    for (module, name), value in replaced.items():
        setattr(module, name, value)
    try:
        start = time.perf_counter()
        page = build()
        seconds = time.perf_counter() - start
    finally:
        for (module, name), value in saved.items():
            setattr(module, name, value)
    config = page.get_config_file()
    return seconds, {"components": len(config["components"]), "events": len(config["dependencies"]),
                     "config_kb": len(json.dumps(config, default=str)) // 1024}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="atelier-page-build-"))
    runs = base / "runs"
    runs.mkdir()

    def build() -> gr.Blocks:
        services = gui.page.Services(runs, JobManager(runs), Presets(base / "presets"), Watchers(), [base])
        return gui.page.build_page(services)

    best: dict[str, float] = {}
    sizes: dict[str, dict] = {}
    for _ in range(args.rounds):  # the ways interleaved, so a busy machine slows each alike
        for way, replaced in WAYS.items():
            seconds, sizes[way] = measure(build, replaced)
            best[way] = min(best.get(way, seconds), seconds)
    for way in WAYS:
        print(json.dumps({"way": way, "build_s": round(best[way], 2), **sizes[way]}))


if __name__ == "__main__":
    main()
