"""`python -m trainers.train.launcher <accelerate launch arguments>`: `accelerate launch`, ending with the trainer's own
exit status (2: the config or input was refused, 1: a failure) and without accelerate's traceback on top of the
trainer's own error line. The GUI starts every run this way; `accelerate launch` works just as well by hand.
"""
from __future__ import annotations

import subprocess
import sys


def _child_exit_code(err: BaseException) -> int | None:
    """The exit code of the process that failed first in a multi-process launch (torch's ChildFailedError); the
    others were then ended by a signal (negative codes)."""
    failures = getattr(err, "failures", None)
    if not isinstance(failures, dict) or not failures:
        return None
    exited = [(getattr(f, "timestamp", 0), rank, f.exitcode) for rank, f in failures.items()
              if isinstance(getattr(f, "exitcode", None), int) and f.exitcode > 0]
    return min(exited)[2] if exited else 1


def main(argv: list[str] | None = None) -> int:
    from accelerate.commands.launch import launch_command, launch_command_parser

    args = launch_command_parser().parse_args(argv)
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
