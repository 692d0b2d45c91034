"""`python -m trainers.train.launcher <accelerate launch arguments>`: `accelerate launch`, ending with the trainer's own
exit status (2: the config or input was refused, 1: a failure) and without accelerate's traceback on top of the
trainer's own error line. The GUI starts every run this way; `accelerate launch` works just as well by hand.

A single-process run is started in this very process, with the environment accelerate's simple launcher would give
it: no second interpreter, and no import of accelerate's launcher before the trainer's own, which saves about two
seconds before the first step. Anything else (several processes or machines, DeepSpeed/FSDP, an accelerate config
file of the user's) goes through `accelerate launch`.
"""
from __future__ import annotations

import os
import runpy
import subprocess
import sys
from pathlib import Path
from typing import Any

from trainers.core.errors import EXIT_BAD_INPUT

# The flags Atelier's own command gives a single process (trainers/core/launch.py), with accelerate's env names.
_SIMPLE_FLAGS = {"--num_cpu_threads_per_process": "OMP_NUM_THREADS", "--num_processes": None, "--num_machines": None,
                 "--mixed_precision": "ACCELERATE_MIXED_PRECISION", "--dynamo_backend": "ACCELERATE_DYNAMO_BACKEND",
                 "--main_process_port": None, "--gpu_ids": "CUDA_VISIBLE_DEVICES"}


def simple_launch_env(argv: list[str]) -> tuple[dict[str, str], list[str]] | None:
    """(environment, `-m module args...`) when `argv` launches one process on one machine with flags only from
    _SIMPLE_FLAGS and no accelerate config file of the user's applies; else None."""
    if _user_accelerate_config().exists() or "-m" not in argv:
        return None
    split = argv.index("-m")
    flags, rest = argv[:split], argv[split + 1:]
    if len(flags) % 2 or not rest:
        return None
    given = dict(zip(flags[::2], flags[1::2]))
    if set(given) - set(_SIMPLE_FLAGS) or given.get("--num_processes", "1") != "1" or given.get("--num_machines",
                                                                                                  "1") != "1":
        return None
    env = {"ACCELERATE_USE_CPU": os.environ.get("ACCELERATE_USE_CPU", "False"), "ACCELERATE_MIXED_PRECISION": "no",
           "ACCELERATE_DYNAMO_BACKEND": "NO", "ACCELERATE_DYNAMO_MODE": "default",
           "ACCELERATE_DYNAMO_USE_FULLGRAPH": "False", "ACCELERATE_DYNAMO_USE_DYNAMIC": "False", "ACCELERATE_DYNAMO_USE_REGIONAL_COMPILATION": "False",
           "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    for flag, value in given.items():
        name = _SIMPLE_FLAGS[flag]
        if name:
            env[name] = {"--dynamo_backend": value.upper(), "--mixed_precision": value.lower()}.get(flag, value)
    return env, rest


def _user_accelerate_config() -> Path:
    """The default config file `accelerate launch` would read (accelerate config writes it)."""
    home = os.environ.get("HF_HOME") or os.path.join(os.environ.get("XDG_CACHE_HOME", "~/.cache"), "huggingface")
    given = os.environ.get("ACCELERATE_CONFIG_FILE")
    return Path(given or Path(home, "accelerate", "default_config.yaml")).expanduser()


def _run_here(env: dict[str, str], module_argv: list[str]) -> int:
    os.environ.update(env)
    sys.argv = [module_argv[0], *module_argv[1:]]
    try:
        runpy.run_module(module_argv[0], run_name="__main__", alter_sys=True)
    except SystemExit as done:
        code = done.code
        return code if isinstance(code, int) else (0 if code is None else 1)
    return 0


def _child_exit_code(err: BaseException) -> int | None:
    """The exit code of the process that failed first in a multi-process launch (torch's ChildFailedError); the
    others were then ended by a signal (negative codes)."""
    failures = getattr(err, "failures", None)
    if not isinstance(failures, dict) or not failures:
        return None
    exited = [(getattr(f, "timestamp", 0), rank, f.exitcode) for rank, f in failures.items()
              if isinstance(getattr(f, "exitcode", None), int) and f.exitcode > 0]
    return min(exited)[2] if exited else 1


def _main_address_problem(args: Any) -> str | None:
    """Several machines: the main address and port, checked before any process starts (else a bad address only
    shows as a rendezvous timeout minutes later)."""
    machines, ip = getattr(args, "num_machines", None) or 1, getattr(args, "main_process_ip", None)
    if machines < 2 or not ip:
        return None
    from trainers.core.launch import main_address_check

    return main_address_check(ip, int(args.main_process_port or 29500), int(args.machine_rank or 0))[0]


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    simple = simple_launch_env(argv)
    if simple is not None:
        return _run_here(*simple)
    from accelerate.commands.launch import launch_command, launch_command_parser

    args = launch_command_parser().parse_args(argv)
    problem = _main_address_problem(args)
    if problem:
        print(f"error: {problem}", file=sys.stderr, flush=True)
        return EXIT_BAD_INPUT
    try:
        launch_command(args)
    except subprocess.CalledProcessError as err:
        return err.returncode if err.returncode > 0 else 1
    except Exception as err:  # noqa: BLE001 - only a child's failure is translated; anything else is raised
        code = _child_exit_code(err)
        if code is None:
            raise
        return code
    return 0


if __name__ == "__main__":
    sys.exit(main())
