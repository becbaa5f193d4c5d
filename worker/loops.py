"""A piece of background work repeated every few seconds in a task of its own, until closed."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

from store import StoreError

__all__ = ("Periodic",)

logger = logging.getLogger(__name__)


class Periodic:
    """Runs `work` every `seconds` in a task named `name`; a failure is logged and the next round goes on."""

    def __init__(self, work: Callable[[], Awaitable[object]], *, seconds: float, name: str) -> None:
        self._work = work
        self._seconds = seconds
        self._name = name
        self._task: asyncio.Task[None] | None = None

    async def once(self) -> None:
        """One round, its failure logged rather than raised (a database away for a moment is a warning)."""
        try:
            await self._work()
        except StoreError as error:
            logger.warning("%s failed: %s", self._name, error)
        except Exception:
            logger.exception("%s failed", self._name)

    def start(self, *, wait_first: bool = False) -> None:
        """Start the rounds, the first at once or, with `wait_first`, after `seconds`."""
        if self._task is None:
            self._task = asyncio.create_task(self._loop(wait_first), name=self._name)

    async def aclose(self) -> None:
        """Stop the rounds (a round under way is cancelled) and wait for the task to end."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _loop(self, wait_first: bool) -> None:
        if wait_first:
            await asyncio.sleep(self._seconds)
        while True:
            await self.once()
            await asyncio.sleep(self._seconds)
