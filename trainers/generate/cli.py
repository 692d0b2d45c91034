"""`python -m trainers generate|compare`: flags come from the option declarations (one flag per option).

    python -m trainers generate --model /models/sd15 --prompt "a dog --d 42" --lora my.safetensors:0.8 --images-per-prompt 4
    python -m trainers generate --config gen.toml --run-dir runs/my-job
    python -m trainers compare --compare-run runs/20260101-lora-dog --seed 42     # the run's model and sample prompts
    python -m trainers compare --compare-run runs/20260101-lora-dog --prompt "sks dog on a beach" --weight 0.5 --weight 1
"""
from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from trainers.core.job import JobEnd, checked_config, job_folder, run_reported
from trainers.core.options.jobs import add_job_arguments, flag_values
from trainers.generate.job import GenerationFailed, run_job
from trainers.generate.video import CLIP_SUFFIX
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
    values = flag_values(args)
    if mode == "compare":
        values["mode"] = "compare"
    cfg = checked_config(args, lambda: fill_from_run(load_generate_config(args.config, args.overrides, values)),
                         check_config, "the generation config has problems")
    if isinstance(cfg, int):
        return cfg
    job_dir, life = job_folder(args, cfg, new_job_dir, method=cfg.mode)
    return run_reported(life, job_dir, lambda: _work(cfg, job_dir, life.events),
                        bad_input=(ValueError,), failures=(GenerationFailed,))


def _work(cfg: GenerateConfig, job_dir: Path, events: Any) -> JobEnd:
    result = run_job(cfg, job_dir, events)
    kind = "clips" if any(p.suffix == CLIP_SUFFIX for p in result.images) else "images"
    return JobEnd(str(result.output), f"{len(result.images)} {kind}" + (f", grid {result.grid}" if result.grid else ""),
                  {"output": str(result.output), "images": len(result.images)},
                  {"images": len(result.images), "prompt_encodes": result.prompt_encodes,
                   "failed_workers": result.failed_workers})
