"""Lines for standard output that may be piped into `head`: once the reader has gone, the rest is dropped."""

from __future__ import annotations

import os
import sys

__all__ = ("detach_stdout", "say")


def say(line: str = "") -> None:
    """Print `line`; once stdout's reader has gone (`| head`), drop it and every later line, quietly.

    The command goes on: a purge piped into `head` still erases everything it was asked to.
    """
    try:
        print(line, flush=True)
    except BrokenPipeError:
        detach_stdout()


def detach_stdout() -> None:
    """Point stdout at the null device, so that no later write (nor the final flush) fails again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, sys.stdout.fileno())
    finally:
        os.close(devnull)
