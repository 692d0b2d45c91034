"""`python -m trainers generate|compare`: flags come from the option declarations (one flag per option).

    python -m trainers generate --model /models/sd15 --prompt "a dog --d 42" --lora my.safetensors:0.8 --images-per-prompt 4
    python -m trainers generate --config gen.toml --run-dir runs/my-job
    python -m trainers compare --compare-run runs/20260101-lora-dog --seed 42     # the run's model and sample prompts
    python -m trainers compare --compare-run runs/20260101-lora-dog --prompt "sks dog on a beach" --weight 0.5 --weight 1
"""
from __future__ import annotations

import argparse
import json
import traceback
from pathlib import Path
from typing import Any

from trainers.core.errors import EXIT_BAD_INPUT, ConfigError
from trainers.core.options.jobs import add_job_arguments, flag_values
from trainers.generate.options import (
    GEN_OPTIONS,
    GenerateConfig,
    check_config,
    fill_from_run,
    load_generate_config,
    new_job_dir,
)

_SINGULAR = {"prompts": "prompt", "loras": "lora", "compare_loras": "compare-lora", "compare_weights": "weight"}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_job_arguments(parser, GEN_OPTIONS, "docs/generate.md", "runs/<time>-<mode>-<name>", _SINGULAR, skip=("mode",))


def main(args: argparse.Namespace, mode: str) -> int:
    from trainers.core.lifecycle import Lifecycle, job_started
    from trainers.core.secrets import install_redaction

    install_redaction()
    values = flag_values(args)
    if mode == "compare":
        values["mode"] = "compare"
    try:
        cfg = fill_from_run(load_generate_config(args.config, args.overrides, values))
        issues = check_config(cfg)
        if issues:
            raise ConfigError(issues)
    except ConfigError as err:
        message = f"the generation config has problems:\n{err}"
        return Lifecycle(args.run_dir).failed(message, EXIT_BAD_INPUT)
    if args.print_config:
        print(cfg.to_toml())
        return 0
    job_dir = args.run_dir or new_job_dir(Path("runs"), cfg)
    return run(cfg, job_dir, job_started(job_dir, cfg, method=cfg.mode))


def run(cfg: GenerateConfig, job_dir: Path, life: Any) -> int:
    from trainers.core.rundir import RunState
    from trainers.generate.job import GenerationFailed, GenerationStopped, run_job
    from trainers.models import ModelLoadError

    try:
        result = run_job(cfg, job_dir, life.events)
    except GenerationStopped as stopped:
        life.stopped(str(job_dir), str(stopped), record_output=False)
        print(str(stopped))
        return 0
    except (ModelLoadError, ConfigError, GenerationFailed, ValueError) as err:
        return life.failed(str(err), EXIT_BAD_INPUT if not isinstance(err, GenerationFailed) else 1)
    except KeyboardInterrupt:
        return life.failed("stopped by the user (interrupt)", 130, state=RunState.STOPPED)
    except Exception as err:  # noqa: BLE001 - report anything to the job folder, then fail
        traceback.print_exc()
        return life.failed(f"{type(err).__name__}: {err}", 1, trace=traceback.format_exc(limit=-8))
    life.finished(str(result.output), f"{len(result.images)} images" + (f", grid {result.grid}" if result.grid else ""),
                  images=len(result.images), prompt_encodes=result.prompt_encodes,
                  failed_workers=result.failed_workers)
    print(json.dumps({"output": str(result.output), "images": len(result.images)}, ensure_ascii=False))
    return 0
