"""How `serve` sets uvicorn up: the fastest event loop and HTTP parser the platform has, and a heap
frozen once started."""

from __future__ import annotations

import gc
from typing import Any

import uvicorn
from starlette.types import ASGIApp

__all__ = ("freeze_startup_objects", "server_config")


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
    traversed all of it (garbage collection took ~6.5% of the loop thread). Frozen, it is skipped,
    and, in a process forked later, its pages are not written to by the collector. Start-up's own
    garbage is collected first, so none of it is kept for good.
    """
    gc.collect()
    gc.freeze()
