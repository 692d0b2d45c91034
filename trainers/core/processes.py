"""Whether a process, or any process of a group, is still there (torch-free: the GUI uses it too)."""
from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path


def pid_alive(pid: int | None) -> bool:
    """True while `pid` runs (or belongs to another user); a zombie counts as dead."""
    if not pid:
        return False
    reached = _signal_zero(os.kill, pid)
    if reached is not None:
        return reached
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except OSError:
        return True


def group_alive(pgid: int | None) -> bool:
    """True while any process of the process group `pgid` runs (or belongs to another user); zombies count as dead."""
    if not pgid:
        return False
    reached = _signal_zero(os.killpg, pgid)
    if reached is not None:
        return reached
    proc = Path("/proc")
    if not proc.is_dir():  # no /proc: a zombie counts as alive
        return True
    for entry in proc.iterdir():
        try:
            state, _parent, group = (entry / "stat").read_text().rsplit(")", 1)[1].split()[:3]
        except (OSError, IndexError, ValueError):
            continue  # not a process, or one that just ended
        if int(group) == pgid and state != "Z":
            return True
    return False


def _signal_zero(send: Callable[[int, int], None], target: int) -> bool | None:
    """False: nothing is there; True: something of another user is; None: ours (a zombie, perhaps: look closer)."""
    try:
        send(target, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return None
