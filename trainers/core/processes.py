"""Whether a process is still there (torch-free: the GUI uses it too)."""
from __future__ import annotations

import os
from pathlib import Path


def pid_alive(pid: int | None) -> bool:
    """True while `pid` runs (or belongs to another user); a zombie counts as dead."""
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except OSError:
        return True
