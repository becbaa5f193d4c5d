"""`worker.Periodic`: background rounds that survive a failing round and stop when closed."""

from __future__ import annotations

import asyncio
import inspect
import logging

import pytest

from store import DatabaseUnavailable
from worker import Periodic

from .waiting import eventually

pytestmark = pytest.mark.anyio


async def test_a_failing_round_is_logged_and_the_rounds_go_on(caplog: pytest.LogCaptureFixture) -> None:
    rounds: list[int] = []

    async def work() -> None:
        rounds.append(len(rounds))
        if len(rounds) == 1:
            raise DatabaseUnavailable("the database is away")
        if len(rounds) == 2:
            raise RuntimeError("a bug")

    periodic = Periodic(work, seconds=0, name="testing rounds")
    with caplog.at_level(logging.WARNING, logger="worker.loops"):
        periodic.start()
        await eventually(lambda: _at_least(rounds, 3))
        await periodic.aclose()
    assert [(r.levelname, r.getMessage()) for r in caplog.records] == [
        ("WARNING", "testing rounds failed: the database is away"),
        ("ERROR", "testing rounds failed"),
    ]
    assert not [
        task for task in asyncio.all_tasks() if task.get_name() == "testing rounds"
    ]  # no round to come


async def test_waiting_first_runs_no_round_before_the_interval() -> None:
    ran: list[bool] = []

    async def work() -> None:
        ran.append(True)

    periodic = Periodic(work, seconds=3600, name="hourly")
    periodic.start(wait_first=True)
    [task] = [task for task in asyncio.all_tasks() if task.get_name() == "hourly"]
    # Started and waiting: the interval's wait is under way, and no round came before it.
    await eventually(lambda: _suspended(task))
    await periodic.aclose()
    assert ran == []
    await periodic.once()
    assert ran == [True]


async def _at_least(rounds: list[int], count: int) -> bool | None:
    return True if len(rounds) >= count else None


async def _suspended(task: asyncio.Task[None]) -> bool | None:
    """The task ran up to a wait of its own (not merely created)."""
    return True if inspect.getcoroutinestate(task.get_coro()) == inspect.CORO_SUSPENDED else None  # pyright: ignore[reportArgumentType]
