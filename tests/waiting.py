"""Waiting on a condition in a test: ask it again until it holds, failing the test after a deadline.

The deadline is generous (a loaded machine is slow, never wrong) and only fails the test; nothing
depends on how long the wait took.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

import pytest

__all__ = ("DEADLINE", "eventually", "eventually_sync")

T = TypeVar("T")

DEADLINE = 60.0
"""Seconds before a condition that never holds fails the test."""


async def eventually(check: Callable[[], Awaitable[T | None]], *, deadline: float = DEADLINE) -> T:
    """What `check()` answers once it answers something other than `None`."""
    async with asyncio.timeout(deadline):
        while True:
            value = await check()
            if value is not None:
                return value
            await asyncio.sleep(0.02)


def eventually_sync(condition: Callable[[], bool], what: str, *, deadline: float = DEADLINE) -> None:
    """Return once `condition()` holds; fail the test saying `what` it waited for after `deadline`."""
    limit = time.monotonic() + deadline
    while not condition():
        if time.monotonic() > limit:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.01)
