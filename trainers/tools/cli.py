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

from trainers.core.job import JobEnd, run_verb_job
from trainers.core.lifecycle import Lifecycle
from trainers.core.options.jobs import add_job_arguments
from trainers.tools.options import JOB_METHOD, VERBS, ToolConfig, check_config, new_job_dir, options_for

_SINGULAR = {"loras": "lora", "lbws": "lbw"}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    verbs = parser.add_subparsers(dest="verb", required=True, metavar="VERB")
    for verb, what in VERBS.items():
        sub = verbs.add_parser(verb, help=what, description=f"tools {verb}: {what}.")
        add_job_arguments(sub, options_for(verb), "docs/tools.md", f"runs/<time>-tools-{verb}-<name>", _SINGULAR,
                          choices=False)


def main(args: argparse.Namespace) -> int:
    return run_verb_job(args, ToolConfig, check_config, new_job_dir, JOB_METHOD, _work)


def _work(cfg: ToolConfig, job_dir: Path, life: Lifecycle) -> JobEnd:
    from trainers.tools.job import run_tool

    output, job = run_tool(cfg, job_dir, life.events)
    return JobEnd(str(output), f"wrote {output}", {"output": str(output), "written": [str(p) for p in job.outputs]})
