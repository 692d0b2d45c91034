"""`python -m trainers caption|masks`: one flag per option (trainers/caption/options.py, trainers/caption/mask_options.py).

    python -m trainers caption --images data/10_sks --captioner wd14 --trigger-word sks
    python -m trainers caption --images data --captioner florence2 --prompt-template detailed --batch-size 8
    python -m trainers caption --images data --resume runs/<stopped caption job>
    python -m trainers masks --images data/10_sks --prompt "a person" --masks-dir data_masks/10_sks

A job runs in a folder (--run-dir, default runs/<time>-<verb>-<folder name>) with its config, events, done.txt
(the images it finished) and report.
"""
from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from trainers.caption.options import JOB_METHOD, VERBS, JobConfig, check_config, new_job_dir, options_for
from trainers.core.job import JobEnd, run_verb_job
from trainers.core.lifecycle import Lifecycle
from trainers.core.options.jobs import add_job_arguments


def add_arguments(commands: argparse._SubParsersAction) -> None:
    """The `caption` and `masks` commands, each run by `main`."""
    for verb, what in VERBS.items():
        sub = commands.add_parser(verb, help=what, description=f"{verb}: {what}.")
        sub.set_defaults(job_main=main, verb=verb)
        add_job_arguments(sub, options_for(verb), "docs/captioning.md", f"runs/<time>-{verb}-<folder name>",
                          choices=False)


def main(args: argparse.Namespace) -> int:
    return run_verb_job(args, JobConfig, check_config, new_job_dir, JOB_METHOD, _work)


def _work(cfg: JobConfig, job_dir: Path, life: Lifecycle) -> JobEnd:
    summary = _run(cfg, job_dir, life.events)
    return JobEnd(str(job_dir), summary, {"job": str(job_dir), "summary": summary})


def _run(cfg: JobConfig, job_dir: Path, events: Any) -> str:
    """Run the job; returns its one-line summary."""
    from trainers.caption.job import ImageJob

    job = ImageJob(cfg, job_dir, events)
    if cfg.verb == "caption":
        from trainers.caption.run import run
    else:
        from trainers.caption.masks import run
    return run(cfg, job)
