"""`python -m trainers <method> --config run.toml --run-dir DIR [--set name=value ...]`

Also: `python -m trainers demo --out DIR` (tiny model + dataset, offline),
`python -m trainers preflight --config run.toml [--num-processes N]` (the dataset report, no training) and
`python -m trainers options` (the option table, as markdown), and
`python -m trainers generate|compare` (images and compare grids; see trainers/generate/).
"""
from __future__ import annotations

import argparse
import os
import sys
import time
import traceback
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from trainers.core.options import TrainConfig
    from trainers.core.events import EventLog

METHODS = {"lora": "trainers.methods.lora.trainer", "dreambooth": "trainers.methods.dreambooth.trainer", "finetune": "trainers.methods.finetune.trainer"}
EXIT_BAD_INPUT = 2


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m trainers", description="Atelier trainers (headless).")
    sub = parser.add_subparsers(dest="command", required=True)
    for method in METHODS:
        p = sub.add_parser(method, help=f"train a {method}")
        p.add_argument("--config", type=Path, help="TOML config (sectioned, or a flat sd-scripts config_file)")
        p.add_argument("--run-dir", type=Path, help="run directory for events/status (default: runs/<time>-<name>)")
        p.add_argument("--set", dest="overrides", action="append", default=[], metavar="NAME=VALUE",
                       help="override one option; repeatable; VALUE is read as TOML (e.g. 1e-4, true, \"text\")")
        p.add_argument("--print-config", action="store_true", help="print the resolved config and exit")
    demo = sub.add_parser("demo", help="build a tiny offline model and dataset")
    demo.add_argument("--out", type=Path, required=True)
    demo.add_argument("--sdxl", action="store_true", help="also build a tiny SDXL model")
    sub.add_parser("options", help="print the table of options (markdown)")
    pre = sub.add_parser("preflight", help="check a config and its dataset without training (no model is loaded)")
    pre.add_argument("--config", type=Path, help="TOML config, as for training")
    pre.add_argument("--set", dest="overrides", action="append", default=[], metavar="NAME=VALUE")
    pre.add_argument("--num-processes", type=int, default=None,
                     help="processes the run will use, for its steps (default: the config's num_processes)")
    pre.add_argument("--method", choices=sorted(METHODS), default="lora")
    pre.add_argument("--json", action="store_true", help="print the report as JSON")
    acc = sub.add_parser("accelerate-config", help="print the accelerate config (YAML) of a config's launch options, "
                         "for `accelerate launch --config_file` (needed for DeepSpeed and FSDP)")
    acc.add_argument("--config", type=Path, help="TOML config, as for training")
    acc.add_argument("--set", dest="overrides", action="append", default=[], metavar="NAME=VALUE")
    acc.add_argument("--method", choices=sorted(METHODS), default="finetune")
    from trainers.generate.cli import add_arguments as add_generate_arguments

    add_generate_arguments(sub.add_parser("generate", help="generate images (every GPU, one pipeline each)"))
    add_generate_arguments(sub.add_parser("compare", help="render a run's saves against prompts into a grid"))
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "demo":
        from trainers.demo import build_demo

        for line in build_demo(args.out, sdxl=args.sdxl):
            print(line)
        return 0
    if args.command == "options":
        from trainers.core.options.docs import options_markdown

        print(options_markdown())
        return 0
    if args.command in ("generate", "compare"):
        from trainers.generate.cli import main as generate_main

        return generate_main(args, args.command)
    if args.command == "accelerate-config":
        from trainers.core.options import ConfigError, load_config
        from trainers.train.distributed import accelerate_config_text

        try:
            print(accelerate_config_text(load_config(args.method, args.config, args.overrides)), end="")
        except ConfigError as err:
            print(f"error: {err}", file=sys.stderr)
            return EXIT_BAD_INPUT
        return 0
    if args.command == "preflight":
        return run_preflight(args.method, args.config, args.overrides, args.num_processes, args.json)
    return run_method(args.command, args.config, args.run_dir, args.overrides, args.print_config)


def run_preflight(method: str, config: Path | None, overrides: list[str], num_processes: int | None,
                  as_json: bool) -> int:
    """Exit 0 when the run can start, 2 when the report lists errors. Loads no model (nor torch)."""
    import json

    from trainers.core.options import ConfigError, load_config
    from trainers.data.preflight import PreflightReport, preflight

    warnings: list[str] = []
    try:
        cfg = load_config(method, config, overrides, warnings)
    except ConfigError as err:
        report = PreflightReport(num_processes or 1, errors=err.issues, warnings=warnings)
    else:
        report = preflight(cfg, num_processes)
        report.warnings[:0] = warnings
    print(json.dumps(report.to_dict(), indent=1, ensure_ascii=False) if as_json else report.text())
    return 0 if report.ok else EXIT_BAD_INPUT


def run_method(method: str, config: Path | None, run_dir: Path | None, overrides: list[str],
               print_only: bool = False) -> int:
    from trainers.core.options import ConfigError, load_config
    from trainers.data.images import ImageLoadError
    from trainers.data.kohya_folders import DatasetLayoutError
    from trainers.core.events import EventLog, update_status
    from trainers.train.faults import TrainingFailed
    from trainers.train.loop import TrainingStopped
    from trainers.models import ModelLoadError
    from trainers.core.secrets import install_redaction

    install_redaction()
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    is_main = os.environ.get("RANK", "0") == "0"
    warnings: list[str] = []
    events = EventLog(run_dir, is_main)
    try:
        cfg = load_config(method, config, overrides, warnings)
        if print_only:
            print(cfg.to_toml())
            return 0
        if run_dir is None:
            from trainers.train.session import default_run_dir

            run_dir = default_run_dir(Path("runs"), cfg.output_name)
            events = EventLog(run_dir, is_main)
        if is_main:
            run_dir.mkdir(parents=True, exist_ok=True)
            if not (run_dir / "config.toml").exists():
                cfg.save(run_dir / "config.toml")
            for w in warnings:
                print(f"warning: {w}", file=sys.stderr)
                events.warning(w)
        final = _train(method, cfg, run_dir)
    except TrainingStopped as stopped:
        if is_main:
            events.emit("done", output=str(stopped.path), stopped=True)
            update_status(run_dir, state="stopped", finished=time.time(), exit_code=0, output=str(stopped.path),
                          message=str(stopped))
        print(str(stopped))
        return 0
    except (ConfigError, DatasetLayoutError, ModelLoadError, ImageLoadError) as err:
        return _fail(events, run_dir, is_main, str(err), EXIT_BAD_INPUT, kind=type(err).__name__)
    except KeyboardInterrupt:
        return _fail(events, run_dir, is_main, "stopped by the user (interrupt)", 130, state="stopped")
    except TrainingFailed as err:  # a known cause (NaN loss, out of memory, full disk): no traceback
        return _fail(events, run_dir, is_main, str(err), 1, kind=err.kind, **err.details)
    except Exception as err:  # noqa: BLE001 - report anything to the run directory, then fail
        traceback.print_exc()
        return _fail(events, run_dir, is_main, f"{type(err).__name__}: {err}", 1, kind=type(err).__name__,
                     trace=traceback.format_exc(limit=-8))
    if is_main:
        events.emit("done", output=str(final))
        update_status(run_dir, state="finished", finished=time.time(), exit_code=0, output=str(final))
        print(f"done: {final}")
    return 0


def _train(method: str, cfg: "TrainConfig", run_dir: Path) -> Path:
    import importlib

    from trainers.train.loop import train
    from trainers.train.session import start_session

    session = start_session(cfg, run_dir)
    return train(session, importlib.import_module(METHODS[method]).make_trainable(cfg, session))


def _fail(events: "EventLog", run_dir: Path | None, is_main: bool, message: str, code: int, state: str = "failed",
          **extra) -> int:
    from trainers.core.events import update_status

    print(f"error: {message}", file=sys.stderr)
    if not is_main and code == 1 and run_dir is not None:
        # A crash on another rank: the launcher stops the run, and rank 0 fails next with a lost connection,
        # so this rank's own error goes to the run directory first (config errors are the same on every rank).
        from trainers.core.events import EventLog

        rank = int(os.environ.get("RANK", "0"))
        message = f"rank {rank}: {message}"
        EventLog(run_dir).emit("error", message=message, exit_code=code, rank=rank, **extra)
        if _status(run_dir).get("state") != "failed":  # else another rank failed first: its error is the cause
            update_status(run_dir, state=state, finished=time.time(), exit_code=code, message=message,
                          failed_rank=rank)
    if is_main:
        events.emit("error", message=message, exit_code=code, **extra)
        if _status(run_dir).get("failed_rank") is None:  # else keep the message of the rank that failed first
            update_status(run_dir, state=state, finished=time.time(), exit_code=code, message=message)
    return code


def _status(run_dir: Path | None) -> dict:
    import json

    try:
        return json.loads((Path(run_dir) / "status.json").read_text(encoding="utf-8"))
    except (TypeError, OSError, ValueError):
        return {}


if __name__ == "__main__":
    sys.exit(main())
