"""`python -m trainers tools <verb>`: one sub-command per verb, one flag per option (from trainers/tools/options.py).

    python -m trainers tools inspect --file my_lora.safetensors
    python -m trainers tools resize --lora my_lora.safetensors --new-rank 8
    python -m trainers tools resize --lora my_lora.safetensors --dynamic-method sv_fro --dynamic-param 0.9 --new-rank 64
    python -m trainers tools merge --model sd15.safetensors --lora style.safetensors:0.8 --lora face.safetensors:0.5
    python -m trainers tools merge --lora a.safetensors --lora b.safetensors:0.5 --lora-merge svd --new-rank 32
    python -m trainers tools extract --model-org sdxl_base/ --model-tuned my_finetune.safetensors --dim 32
    python -m trainers tools convert --input my_lora.safetensors --to diffusers --model sd15/

A job runs in a folder (--run-dir, default runs/<time>-tools-<verb>-<name>) with its config, events, report and,
unless save_to says otherwise, its outputs.
"""
from __future__ import annotations

import argparse
import json
import traceback
from pathlib import Path
from typing import Any

from trainers.core.errors import EXIT_BAD_INPUT, BadInput, ConfigError
from trainers.tools.options import JOB_METHOD, VERBS, check_config, load_tool_config, new_job_dir, options_for

_SINGULAR = {"loras": "lora", "lbws": "lbw"}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    verbs = parser.add_subparsers(dest="verb", required=True, metavar="VERB")
    for verb, what in VERBS.items():
        sub = verbs.add_parser(verb, help=what, description=f"tools {verb}: {what}.")
        sub.add_argument("--config", type=Path, help="TOML file of the job's options (see docs/tools.md)")
        sub.add_argument("--run-dir", type=Path, help="job folder (default: runs/<time>-tools-<verb>-<name>)")
        sub.add_argument("--set", dest="overrides", action="append", default=[], metavar="NAME=VALUE",
                         help="set one option; VALUE is read as TOML")
        sub.add_argument("--print-config", action="store_true", help="print the resolved options and exit")
        flags = sub.add_argument_group("options (each also settable in the TOML file)")
        for opt in options_for(verb):
            flag = "--" + _SINGULAR.get(opt.name, opt.name).replace("_", "-")
            if opt.kind == "list":
                flags.add_argument(flag, dest=f"opt_{opt.name}", action="append", metavar="VALUE",
                                   help=f"{opt.help} (repeatable)")
            else:
                flags.add_argument(flag, dest=f"opt_{opt.name}", metavar=opt.kind.upper(), help=opt.help,
                                   type={"int": int, "float": float}.get(opt.kind, str))


def main(args: argparse.Namespace) -> int:
    from trainers.core.lifecycle import Lifecycle, job_started
    from trainers.core.secrets import install_redaction

    install_redaction()
    values = {k.removeprefix("opt_"): v for k, v in vars(args).items() if k.startswith("opt_") and v is not None}
    try:
        cfg = load_tool_config(args.verb, args.config, args.overrides, values)
        issues = check_config(cfg)
        if issues:
            raise ConfigError(issues)
    except ConfigError as err:
        return Lifecycle(args.run_dir).failed(f"tools {args.verb}: the options have problems:\n{err}", EXIT_BAD_INPUT)
    if args.print_config:
        print(cfg.to_toml())
        return 0
    job_dir = args.run_dir or new_job_dir(Path("runs"), cfg)
    return _run(cfg, job_dir, job_started(job_dir, cfg, method=JOB_METHOD, verb=cfg.verb))


def _run(cfg: Any, job_dir: Path, life: Any) -> int:
    from trainers.core.rundir import RunState
    from trainers.tools.job import ToolStopped, run_tool

    try:
        output, job = run_tool(cfg, job_dir, life.events)
    except ToolStopped as stopped:
        life.stopped(str(job_dir), str(stopped), record_output=False)
        print(str(stopped))
        return 0
    except BadInput as err:
        return life.failed(f"tools {cfg.verb}: {err}", EXIT_BAD_INPUT)
    except KeyboardInterrupt:
        return life.failed("stopped by the user (interrupt)", 130, state=RunState.STOPPED)
    except Exception as err:  # noqa: BLE001 - report anything to the job folder, then fail
        traceback.print_exc()
        return life.failed(f"tools {cfg.verb}: {type(err).__name__}: {err}", 1, trace=traceback.format_exc(limit=-8))
    written = [str(p) for p in job.outputs]
    life.finished(str(output), f"wrote {output}")
    print(json.dumps({"output": str(output), "written": written}, ensure_ascii=False))
    return 0
