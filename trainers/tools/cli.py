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
from typing import Any, Callable

from trainers.core.errors import EXIT_BAD_INPUT, BadInput, ConfigError, ConfigIssue
from trainers.core.options.jobs import add_job_arguments, flag_values
from trainers.core.options.verbs import VerbConfig
from trainers.tools.options import JOB_METHOD, VERBS, ToolConfig, check_config, new_job_dir, options_for

_SINGULAR = {"loras": "lora", "lbws": "lbw"}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    verbs = parser.add_subparsers(dest="verb", required=True, metavar="VERB")
    for verb, what in VERBS.items():
        sub = verbs.add_parser(verb, help=what, description=f"tools {verb}: {what}.")
        add_job_arguments(sub, options_for(verb), "docs/tools.md", f"runs/<time>-tools-{verb}-<name>", _SINGULAR,
                          choices=False)


def checked_config(args: argparse.Namespace, config_class: type[VerbConfig],
                   check: Callable[[Any], list[ConfigIssue]]) -> Any:
    """The job's config from --config, --set and the option flags, checked; an exit code instead when it has
    problems (recorded in --run-dir) or --print-config printed it."""
    from trainers.core.lifecycle import Lifecycle
    from trainers.core.secrets import install_redaction

    install_redaction()
    values = flag_values(args)
    label = f"{config_class.command}{args.verb}"
    try:
        cfg = config_class.load(args.verb, args.config, args.overrides, values)
        issues = check(cfg)
        if issues:
            raise ConfigError(issues)
    except ConfigError as err:
        return Lifecycle(args.run_dir).failed(f"{label}: the options have problems:\n{err}", EXIT_BAD_INPUT)
    if args.print_config:
        print(cfg.to_toml())
        return 0
    return cfg


def main(args: argparse.Namespace) -> int:
    from trainers.core.lifecycle import job_started

    cfg = checked_config(args, ToolConfig, check_config)
    if isinstance(cfg, int):
        return cfg
    job_dir = args.run_dir or new_job_dir(Path("runs"), cfg)
    return _run(cfg, job_dir, job_started(job_dir, cfg, method=JOB_METHOD, verb=cfg.verb))


def _run(cfg: Any, job_dir: Path, life: Any) -> int:
    def work() -> tuple[str, str, dict[str, Any]]:
        from trainers.tools.job import run_tool

        output, job = run_tool(cfg, job_dir, life.events)
        return str(output), f"wrote {output}", {"output": str(output), "written": [str(p) for p in job.outputs]}

    return run_reported(life, job_dir, f"tools {cfg.verb}", work)


def run_reported(life: Any, job_dir: Path, label: str, work: Callable[[], tuple[str, str, dict[str, Any]]]) -> int:
    """Run a job's `work` (-> its output, a message, what to print as JSON) and record in the job's folder how it
    ended: finished, stopped by the user, bad input named, or failed with the error."""
    from trainers.core.rundir import RunState
    from trainers.tools.job import ToolStopped

    try:
        output, message, printed = work()
    except ToolStopped as stopped:
        life.stopped(str(job_dir), str(stopped), record_output=False)
        print(str(stopped))
        return 0
    except BadInput as err:
        return life.failed(f"{label}: {err}", EXIT_BAD_INPUT)
    except KeyboardInterrupt:
        return life.failed("stopped by the user (interrupt)", 130, state=RunState.STOPPED)
    except Exception as err:  # noqa: BLE001 - report anything to the job folder, then fail
        traceback.print_exc()
        return life.failed(f"{label}: {type(err).__name__}: {err}", 1, trace=traceback.format_exc(limit=-8))
    life.finished(output, message)
    print(json.dumps(printed, ensure_ascii=False))
    return 0
