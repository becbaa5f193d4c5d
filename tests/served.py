"""The server's services in process, on the core tests' app, for tests of what a request sets going."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio

from stream import RunFinished
from web import Settings, create_app
from web.services import Services
from worker import Subscription

from .core_app import core_app
from .scripted import Script

__all__ = ("finished", "served", "until_finished")


@asynccontextmanager
async def served(
    database_url: str, data_dir: Path, script: Script, **settings: Any
) -> AsyncIterator[Services]:
    """`core_app(script)` served as the server serves it (its runner going), with `settings`."""
    app = create_app(
        Settings(database_url=database_url, secret="served-secret", data_dir=data_dir, **settings),
        app=core_app(script),
    )
    async with app.router.lifespan_context(app):
        yield app.state.services


async def finished(s: Services, thread_id: str) -> None:
    """Until the thread's run has published its end (called before the run could publish anything)."""
    with s.broker.subscribe(thread_id) as watch:
        await until_finished(watch)


async def until_finished(subscription: Subscription) -> None:
    """Until `subscription` has been handed a `run_finished`."""
    with anyio.fail_after(30):
        while not any(isinstance(stored.event, RunFinished) for stored in await subscription.next_batch()):
            pass
