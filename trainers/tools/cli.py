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
from pathlib import Path

from trainers.core.job import JobEnd, checked_config, job_folder, run_reported
from trainers.core.options.jobs import add_job_arguments, flag_values
from trainers.tools.options import JOB_METHOD, VERBS, ToolConfig, check_config, new_job_dir, options_for

_SINGULAR = {"loras": "lora", "lbws": "lbw"}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    verbs = parser.add_subparsers(dest="verb", required=True, metavar="VERB")
    for verb, what in VERBS.items():
        sub = verbs.add_parser(verb, help=what, description=f"tools {verb}: {what}.")
        add_job_arguments(sub, options_for(verb), "docs/tools.md", f"runs/<time>-tools-{verb}-<name>", _SINGULAR,
                          choices=False)


def main(args: argparse.Namespace) -> int:
    cfg = checked_config(args, lambda: ToolConfig.load(args.verb, args.config, args.overrides, flag_values(args)),
                         check_config, f"{ToolConfig.command}{args.verb}: the options have problems")
    if isinstance(cfg, int):
        return cfg
    job_dir, life = job_folder(args, cfg, new_job_dir, method=JOB_METHOD, verb=cfg.verb)

    def work() -> JobEnd:
        from trainers.tools.job import run_tool

        output, job = run_tool(cfg, job_dir, life.events)
        return JobEnd(str(output), f"wrote {output}", {"output": str(output), "written": [str(p) for p in job.outputs]})

    return run_reported(life, job_dir, work, f"tools {cfg.verb}")
