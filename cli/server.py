"""How `serve` sets uvicorn up: the fastest event loop and HTTP parser the platform has, a heap
frozen once started, collected less often, and a line that says the server is ready."""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import socket
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any

import uvicorn
from starlette.types import ASGIApp

__all__ = ("FORCED_EXIT", "GC_THRESHOLDS", "Server", "freeze_startup_objects", "server_config")

logger = logging.getLogger(__name__)

FORCED_EXIT = 70
"""The exit status when the shutdown did not finish within its bound (EX_SOFTWARE: a bug to report)."""

GC_THRESHOLDS = (50_000, 10, 10)
"""The collector's thresholds once started; Python's are (700, 10, 10).

A turn allocates tens of thousands of short-lived objects, so with 700 the youngest generation
was collected a few times a turn, and the turn's objects it caught still alive were promoted and
traversed again by the older ones. With 50,000 it is collected once in several turns, when most
of their objects are gone (figures in `docs/benchmarks.md`). Reference cycles live a little longer.
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
    """Uvicorn's server, which also prints `ready_line` once it listens, runs `on_shutdown`, and
    exits within `shutdown_seconds` of a SIGTERM or Ctrl-C whatever its clients do.

    Uvicorn's own graceful shutdown waits for every connection's task with no end ("Waiting for
    background tasks to complete"): `server_config`'s `timeout_graceful_shutdown` bounds that, and a
    watchdog started by the signal ends the process with `FORCED_EXIT` if the shutdown is still not
    done at the bound, so no client and no stuck task can keep it up.
    """

    def __init__(
        self,
        config: uvicorn.Config,
        *,
        ready_line: str,
        on_shutdown: Callable[[], object] = lambda: None,
        shutdown_seconds: float | None = None,
    ) -> None:
        super().__init__(config)
        self._ready_line = ready_line
        self._on_shutdown = on_shutdown
        self._shutdown_seconds = shutdown_seconds
        self._watchdog: threading.Thread | None = None
        self._done = threading.Event()
        logging.getLogger("uvicorn.error").addFilter(_quiet_shutdown_cancel)

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if self.started:
            freeze_startup_objects()
            print(self._ready_line, flush=True)

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        super().handle_exit(sig, frame)
        if self._shutdown_seconds is not None and self._watchdog is None:
            self._watchdog = threading.Thread(
                target=self._exit_at_the_bound,
                args=(self._shutdown_seconds,),
                name="shutdown-watchdog",
                daemon=True,
            )
            self._watchdog.start()

    def _exit_at_the_bound(self, seconds: float) -> None:
        if self._done.wait(seconds):
            return
        logger.error(
            "the shutdown took longer than %g s (DURABLE_CHAT_SHUTDOWN_SECONDS): exiting now", seconds
        )
        logging.shutdown()
        os._exit(FORCED_EXIT)

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        await super().shutdown(sockets)
        # Here, not after `run()`: on SIGTERM uvicorn raises the signal again once it has shut
        # down, and the process dies before any `finally` or `atexit` runs.
        self._on_shutdown()
        self._done.set()


def _quiet_shutdown_cancel(record: logging.LogRecord) -> bool:
    """Uvicorn's traceback for a request it cancelled at the shutdown's bound, as one INFO line.

    A client that holds a request open (half a body sent, say) is cancelled by uvicorn's
    `timeout_graceful_shutdown`, which it then logs as an application error with a traceback; the
    cancellation is the shutdown working as documented, not a failure.
    """
    error = record.exc_info[1] if record.exc_info else None
    if isinstance(error, asyncio.CancelledError) and "timeout graceful shutdown" in str(error):
        record.exc_info = None
        record.exc_text = None
        record.levelno, record.levelname = logging.INFO, "INFO"
        record.msg, record.args = "cancelled a request still open at the shutdown's bound", None
    return True
