"""`serve`'s uvicorn set-up: uvloop and httptools when installed, the start-up heap frozen, collections rarer."""

from __future__ import annotations

import asyncio
import gc
import importlib.util

from starlette.applications import Starlette

from cli.server import GC_THRESHOLDS, freeze_startup_objects, server_config


def test_the_server_uses_uvloop_and_httptools_when_installed_else_asyncio_and_h11() -> None:
    config = server_config(Starlette(), host="127.0.0.1", port=8000)
    config.load()
    has_httptools = importlib.util.find_spec("httptools") is not None
    expected_http = "HttpToolsProtocol" if has_httptools else "H11Protocol"
    assert config.http_protocol_class.__name__ == expected_http
    loop = (config.get_loop_factory() or asyncio.new_event_loop)()
    try:
        has_uvloop = importlib.util.find_spec("uvloop") is not None
        assert type(loop).__module__.startswith("uvloop") is has_uvloop
    finally:
        loop.close()


def test_start_up_objects_are_frozen_out_of_the_collectors_reach_and_collections_come_rarer() -> None:
    kept = [object() for _ in range(10)]
    thresholds = gc.get_threshold()
    try:
        freeze_startup_objects()
        assert gc.get_freeze_count() > len(kept)
        assert gc.get_threshold() == GC_THRESHOLDS
        assert GC_THRESHOLDS[0] > thresholds[0]
    finally:
        gc.unfreeze()
        gc.set_threshold(*thresholds)
