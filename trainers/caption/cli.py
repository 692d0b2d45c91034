"""`python -m trainers caption|masks`: one flag per option (trainers/caption/options.py, trainers/masks/options.py).

    python -m trainers caption --images data/10_sks --captioner wd14 --trigger-word sks
    python -m trainers caption --images data --captioner florence2 --prompt-template detailed --batch-size 8
    python -m trainers caption --images data --resume runs/<stopped caption job>
    python -m trainers masks --images data/10_sks --prompt "a person" --masks-dir data_masks/10_sks

A job runs in a folder (--run-dir, default runs/<time>-<verb>-<folder name>) with its config, events, done.txt
(the images it finished) and report.
"""
from __future__ import annotations

import argparse
import json
import traceback
from pathlib import Path

from trainers.caption.options import JOB_METHOD, VERBS, check_config, load_job_config, new_job_dir, options_for
from trainers.core.errors import EXIT_BAD_INPUT, BadInput, ConfigError


def add_arguments(commands: argparse._SubParsersAction) -> None:
    """The `caption` and `masks` commands, each run by `main`."""
    for verb, what in VERBS.items():
        sub = commands.add_parser(verb, help=what, description=f"{verb}: {what}.")
        sub.set_defaults(job_main=main, verb=verb)
        sub.add_argument("--config", type=Path, help="TOML file of the job's options (see docs/captioning.md)")
        sub.add_argument("--run-dir", type=Path, help=f"job folder (default: runs/<time>-{verb}-<folder name>)")
        sub.add_argument("--set", dest="overrides", action="append", default=[], metavar="NAME=VALUE",
                         help="set one option; VALUE is read as TOML")
        sub.add_argument("--print-config", action="store_true", help="print the resolved options and exit")
        flags = sub.add_argument_group("options (each also settable in the TOML file)")
        for opt in options_for(verb):
            flag = "--" + opt.name.replace("_", "-")
            if opt.kind == "list":
                flags.add_argument(flag, dest=f"opt_{opt.name}", action="append", metavar="VALUE",
                                   help=f"{opt.help} (repeatable)")
            elif opt.kind == "bool":
                flags.add_argument(flag, dest=f"opt_{opt.name}", action=argparse.BooleanOptionalAction,
                                   help=opt.help)
            else:
                flags.add_argument(flag, dest=f"opt_{opt.name}", metavar=opt.kind.upper(), help=opt.help,
                                   type={"int": int, "float": float}.get(opt.kind, str))


def main(args: argparse.Namespace) -> int:
    from trainers.core.lifecycle import Lifecycle, job_started
    from trainers.core.secrets import install_redaction

    install_redaction()
    values = {k.removeprefix("opt_"): v for k, v in vars(args).items() if k.startswith("opt_") and v is not None}
    try:
        cfg = load_job_config(args.verb, args.config, args.overrides, values)
        issues = check_config(cfg)
        if issues:
            raise ConfigError(issues)
    except ConfigError as err:
        return Lifecycle(args.run_dir).failed(f"{args.verb}: the options have problems:\n{err}", EXIT_BAD_INPUT)
    if args.print_config:
        print(cfg.to_toml())
        return 0
    job_dir = args.run_dir or new_job_dir(Path("runs"), cfg)
    life = job_started(job_dir, cfg, method=JOB_METHOD, verb=cfg.verb)
    from trainers.core.rundir import RunState
    from trainers.tools.job import ToolStopped

    try:
        summary = _run(cfg, job_dir, life.events)
    except ToolStopped as stopped:
        life.stopped(str(job_dir), str(stopped), record_output=False)
        print(str(stopped))
        return 0
    except BadInput as err:
        return life.failed(f"{cfg.verb}: {err}", EXIT_BAD_INPUT)
    except KeyboardInterrupt:
        return life.failed("stopped by the user (interrupt)", 130, state=RunState.STOPPED)
    except Exception as err:  # noqa: BLE001 - report anything to the job folder, then fail
        traceback.print_exc()
        return life.failed(f"{cfg.verb}: {type(err).__name__}: {err}", 1, trace=traceback.format_exc(limit=-8))
    life.finished(str(job_dir), summary)
    print(json.dumps({"job": str(job_dir), "summary": summary}, ensure_ascii=False))
    return 0


def _run(cfg: object, job_dir: Path, events: object) -> str:
    """Run the job; returns its one-line summary."""
    from trainers.caption.job import ImageJob

    job = ImageJob(cfg, job_dir, events)  # type: ignore[arg-type]
    if cfg.verb == "caption":  # type: ignore[attr-defined]
        from trainers.caption.run import run
    else:
        from trainers.masks.run import run
    return run(cfg, job)  # type: ignore[arg-type]
