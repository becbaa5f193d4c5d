"""`durable-chat purge --older-than 90d`: erase the threads idle for longer than an age."""

from __future__ import annotations

import argparse
import asyncio
import re
from datetime import timedelta
from typing import TYPE_CHECKING

from .output import say

if TYPE_CHECKING:
    from store import Purge, Thread

__all__ = ("MAX_AGE", "parse_age", "purge")

MAX_AGE = timedelta(days=36500)
"""The oldest age accepted: a hundred years (any more and the cutoff leaves the calendar)."""

_UNITS = {"d": timedelta(days=1), "h": timedelta(hours=1), "m": timedelta(minutes=1)}
# ASCII digits only: `\d` would take other scripts' digits, which `int` accepts too, silently.
_AGE = re.compile(r"([0-9]+)([dhm])", re.ASCII)
_TIME = "%Y-%m-%d %H:%M:%S"


def parse_age(text: str) -> timedelta:
    """An age like `90d`, `12h` or `30m`: a positive whole number of days, hours or minutes.

    Raises:
        argparse.ArgumentTypeError: Anything else, with what is expected.
    """
    match = _AGE.fullmatch(text)
    if match is None:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not an age: write a whole number and a unit, d (days), h (hours) or m (minutes), "
            "such as 90d, 12h or 30m"
        )
    digits = match.group(1).lstrip("0")
    # Ten digits are more than a hundred years in any unit (and int() refuses thousands of digits).
    age = MAX_AGE + _UNITS["m"] if len(digits) > 9 else int(digits or "0") * _UNITS[match.group(2)]
    if age <= timedelta(0):
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive age: it would purge every thread")
    if age > MAX_AGE:
        raise argparse.ArgumentTypeError(f"{text!r} is too old: at most {MAX_AGE.days}d")
    return age


def purge(database_url: str, older_than: timedelta, *, dry_run: bool, files_url: str | None = None) -> int:
    """Erase (or with `dry_run` list) the threads idle for `older_than`, one line each, then a summary.

    The files of the erased threads go with them, and then their bytes, from `files_url`'s store.
    """
    from store import Database  # here, not at the top: every command's parser imports `parse_age`

    verb = "would remove" if dry_run else "removed"

    def show(threads: list[Thread]) -> None:
        for thread in threads:
            say(
                f"{verb} thread {thread.thread_id} (user {thread.user_id!r}, "
                f"idle since {thread.updated_at.strftime(_TIME)} UTC)"
            )

    async def purged() -> Purge:
        async with await Database.connect(database_url, files_url=files_url) as db:
            result = await db.threads.purge(older_than, dry_run=dry_run, on_batch=show)
            if not dry_run:
                await db.files.collect()
            return result

    result = asyncio.run(purged())
    plural = "" if result.removed == 1 else "s"
    summary = f"{verb} {result.removed} thread{plural} idle since {result.cutoff.strftime(_TIME)} UTC"
    if result.skipped_active:
        summary += (
            f"; kept {result.skipped_active} as old with a run queued or running, which a purge never erases"
        )
    say(summary)
    return 0
