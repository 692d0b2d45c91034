"""`python -m trainers <method> --config run.toml --run-dir DIR [--set name=value ...] [--learning-rate 1e-4 ...]`:
dispatch only. Every option of a method is also a flag of its own (`--<name>`, dashes for underscores), read as
`--set <name>=<value>` in command-line order.

Also: `python -m trainers demo --out DIR` (tiny model + dataset, offline),
`python -m trainers preflight --config run.toml [--num-processes N]` (the dataset report, no training),
`python -m trainers options` (the option table, as markdown),
`python -m trainers accelerate-config --config run.toml` (the accelerate config of DeepSpeed/FSDP runs),
`python -m trainers generate|compare` (images and compare grids; see trainers/generate/),
`python -m trainers tools <verb>` (LoRA and model tools; see trainers/tools/),
`python -m trainers caption|masks` (captions and loss masks of a dataset; see trainers/caption/),
`python -m trainers cluster sbatch|k8s <config>` (SLURM / Kubernetes job files; see trainers/cluster/), and
`python -m trainers scores <run dir>` (a run's saves scored from its samples, the best picked; docs/scores.md).
Methods (their subcommands) come from trainers/core/registry.py.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from trainers.core.registry import METHOD_NAMES, METHODS


class _AppendUnset(argparse.Action):
    """--unset NAME goes into the --set list, in command-line order (the last of --set/--unset NAME wins)."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, value: object,
                 option_string: str | None = None) -> None:
        from trainers.core.options.loading import Unset

        getattr(namespace, self.dest).append(Unset(str(value).strip()))


def _config_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", type=Path, help="config file: ours (TOML), an sd-scripts --config_file (TOML) or a "
                   "kohya_ss GUI config (JSON)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="NAME=VALUE",
                   help="override one option; repeatable; VALUE is read as TOML (e.g. 1e-4, true, \"text\")")
    p.add_argument("--unset", dest="overrides", action=_AppendUnset, metavar="NAME",
                   help="read option NAME as if the config did not set it (its default; sd-scripts' default for an "
                   "sd-scripts or kohya_ss file); repeatable")


def _parser(flags_for: str | None = None) -> argparse.ArgumentParser:
    """The command line; the per-option flags are built for the method `flags_for` only (the one being run; all
    of them when None), since they are most of the parser's build time."""
    from trainers.core.options.jobs import add_training_flags
    from trainers.core.options.training import OPTIONS

    parser = argparse.ArgumentParser(prog="python -m trainers", description="Atelier trainers (headless).")
    sub = parser.add_subparsers(dest="command", required=True)
    for method in METHODS:
        p = sub.add_parser(method.name, help=method.help)
        _config_arguments(p)
        p.add_argument("--run-dir", type=Path, help="run directory for events/status (default: runs/<time>-<name>)")
        p.add_argument("--print-config", action="store_true", help="print the resolved config and what a run would "
                       "say about it (warnings, errors) and exit: 2 when a run would refuse it")
        p.add_argument("--export-sd-scripts", type=Path, metavar="OUT.toml", help="write the config as an sd-scripts "
                       "--config_file and print the command that runs it (implies --print-config)")
        if flags_for in (None, method.name):
            add_training_flags(p, [o for o in OPTIONS if method.name in o.methods])
    from trainers.demo import add_arguments as add_demo_arguments

    add_demo_arguments(sub.add_parser("demo", help="build a tiny offline model and dataset"))
    sub.add_parser("options", help="print the table of options (markdown)")
    pre = sub.add_parser("preflight", help="check a config and its dataset without training (no model is loaded)")
    _config_arguments(pre)
    pre.add_argument("--num-processes", type=int, default=None,
                     help="processes the run will use, for its steps (default: the config's num_processes)")
    pre.add_argument("--method", choices=METHOD_NAMES, default=METHOD_NAMES[0])
    pre.add_argument("--json", action="store_true", help="print the report as JSON")
    acc = sub.add_parser("accelerate-config", help="print the accelerate config (YAML) of a config's launch options, "
                         "for `accelerate launch --config_file` (needed for DeepSpeed and FSDP)")
    _config_arguments(acc)
    acc.add_argument("--method", choices=METHOD_NAMES, default="finetune")
    from trainers.generate.cli import add_arguments as add_generate_arguments

    add_generate_arguments(sub.add_parser("generate", help="generate images (every GPU, one pipeline each)"))
    add_generate_arguments(sub.add_parser("compare", help="render a run's saves against prompts into a grid"))
    from trainers.tools.cli import add_arguments as add_tool_arguments

    add_tool_arguments(sub.add_parser("tools", help="LoRA and model tools: inspect, resize, merge, extract, convert"))
    from trainers.caption.cli import add_arguments as add_caption_arguments

    add_caption_arguments(sub)  # caption, masks: dataset jobs (each names its own main)
    from trainers.cluster.cli import add_arguments as add_cluster_arguments

    add_cluster_arguments(sub)  # cluster sbatch|k8s: job files
    from trainers.scores.cli import add_arguments as add_scores_arguments

    add_scores_arguments(sub)  # scores <run dir>: a run's saves scored from its samples
    return parser


def main(argv: list[str] | None = None) -> int:
    given = sys.argv[1:] if argv is None else argv
    args = _parser(given[0] if given and given[0] in METHOD_NAMES else "").parse_args(argv)
    if hasattr(args, "job_main"):
        return args.job_main(args)
    if args.command == "demo":
        from trainers.demo import main as demo_main

        return demo_main(args)
    if args.command == "options":
        from trainers.core.options.docs import options_markdown

        print(options_markdown())
        return 0
    if args.command in ("generate", "compare"):
        from trainers.generate.cli import main as generate_main

        return generate_main(args, args.command)
    if args.command == "tools":
        from trainers.tools.cli import main as tools_main

        return tools_main(args)
    if args.command == "accelerate-config":
        from trainers.core.launch import print_accelerate_config

        return print_accelerate_config(args.method, args.config, args.overrides)
    if args.command == "preflight":
        from trainers.preflight.report import run_preflight

        return run_preflight(args.method, args.config, args.overrides, args.num_processes, args.json)
    if args.print_config or args.export_sd_scripts:
        from trainers.config_report import print_config

        return print_config(args.command, args.config, args.overrides, args.export_sd_scripts)
    from trainers.health.report import check_and_write
    from trainers.methods import method_memory_tips
    from trainers.preflight.validate import check, method_outputs
    from trainers.scores.hook import start_scores
    from trainers.train.run import Checks, run_method

    return run_method(args.command, args.config, args.run_dir, args.overrides,
                      Checks(check, method_outputs, method_memory_tips, check_and_write, start_scores))


if __name__ == "__main__":
    sys.exit(main())
