"""How `serve` sets uvicorn up: the fastest event loop and HTTP parser the platform has, a heap
frozen once started, collected less often, and a line that says the server is ready."""

from __future__ import annotations

import gc
import socket
from collections.abc import Callable
from typing import Any

import uvicorn
from starlette.types import ASGIApp

__all__ = ("GC_THRESHOLDS", "Server", "freeze_startup_objects", "server_config")

GC_THRESHOLDS = (10_000, 10, 10)
"""The collector's thresholds once started; Python's are (700, 10, 10).

A turn allocates tens of thousands of short-lived objects, so with 700 the youngest generation
was collected a few times a turn, and the turn's objects it caught still alive were promoted and
traversed again by the older ones. With 10,000 most of a turn's objects are gone before a
collection runs (figures in `docs/benchmarks.md`). Reference cycles live a little longer.
"""


def server_config(app: ASGIApp, *, host: str, port: int, **options: Any) -> uvicorn.Config:
    """Uvicorn's configuration for `app`: uvloop and httptools where installed, else asyncio and h11.

    Both are dependencies where the platform has wheels (as in `uvicorn[standard]`); `auto` makes
    uvicorn fall back to the pure-Python ones elsewhere (Windows, PyPy) rather than fail.
    """
    return uvicorn.Config(app, host=host, port=port, lifespan="on", loop="auto", http="auto", **options)


def freeze_startup_objects() -> None:
    """Move everything alive now out of the garbage collector's reach, once the server started.

    What start-up builds (modules, the app, pydantic-core's validators and serializers, the
    database pools) lives as long as the process and is most of the heap; every full collection
    traversed all of it. Frozen, it is skipped,
    and, in a process forked later, its pages are not written to by the collector. Start-up's own
    garbage is collected first, so none of it is kept for good. Then collections come less often
    (`GC_THRESHOLDS`).
    """
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)


class Server(uvicorn.Server):
    """Uvicorn's server, which also prints `ready_line` once it listens, and runs `on_shutdown`."""

    def __init__(
        self, config: uvicorn.Config, *, ready_line: str, on_shutdown: Callable[[], object] = lambda: None
    ) -> None:
        super().__init__(config)
        self._ready_line = ready_line
        self._on_shutdown = on_shutdown

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if self.started:
            freeze_startup_objects()
            print(self._ready_line, flush=True)

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        await super().shutdown(sockets)
        # Here, not after `run()`: on SIGTERM uvicorn raises the signal again once it has shut
        # down, and the process dies before any `finally` or `atexit` runs.
        self._on_shutdown()
