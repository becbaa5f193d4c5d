"""Cores: the servers on one, the clients on the other, and how long a process waited for its core.

The machine's cores change speed for seconds at a time and are shared with other work: a server
pinned to its own core (`taskset`) has its CPU per turn measured apart from the clients'.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from pathlib import Path

SERVER_CORE, CLIENT_CORE = 1, 0


def pinned(argv: Sequence[str], core: int = SERVER_CORE) -> list[str]:
    """`argv` run on `core` only (unchanged when `taskset` is missing)."""
    return ["taskset", "-c", str(core), *argv] if shutil.which("taskset") else list(argv)


def pin_this_process(core: int = CLIENT_CORE) -> None:
    """Keep this process (the clients) on `core`, when the machine has more than one."""
    if hasattr(os, "sched_setaffinity") and len(os.sched_getaffinity(0)) > 1:
        os.sched_setaffinity(0, {core})


def core_wait(pid: int | str) -> float:
    """Seconds the process's main thread was runnable but waiting for a core (`/proc/PID/schedstat`)."""
    try:
        return int(Path(f"/proc/{pid}/schedstat").read_text().split()[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return 0.0


def machine_ticks() -> tuple[int, int]:
    """All cores' busy and total clock ticks so far (`/proc/stat`), whoever used them."""
    fields = [int(value) for value in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle and iowait
    return sum(fields) - idle, sum(fields)
