"""Tracing in the store: a span per operation (a load, a checkpoint, a claim), not per statement,
when asked for (`record_store_spans`), and the lookup of the trace a run's attempt was recorded in.

Operation spans are off by default: a turn makes a dozen store calls, and even an unsampled span
costs a context switch each. The store speaks the OpenTelemetry API only. Attributes name the
operation, never content.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Coroutine, Generator
from contextlib import contextmanager
from typing import Any, ParamSpec, TypeVar

import sqlalchemy as sa
from opentelemetry import trace
from opentelemetry.trace import SpanKind
from sqlalchemy.ext.asyncio import AsyncEngine

from .engine import reader, translate_errors
from .errors import NotFound
from .schema import RunRow, metadata

__all__ = ("record_store_spans", "recording_store_spans", "run_trace_id", "store_span", "traced", "tracer")

P = ParamSpec("P")
R = TypeVar("R")

tracer = trace.get_tracer("durable_chat.store")


# `Any` as the coroutine's send and yield types, as `async def` itself declares them.
Operation = Callable[P, Coroutine[Any, Any, R]]

# Process-wide, like the tracer provider it goes with: set once at start by whoever sets that up.
_recording = False


def record_store_spans(enabled: bool) -> None:
    """Start (or stop) recording a span per store operation, process-wide."""
    global _recording
    _recording = enabled


def recording_store_spans() -> bool:
    """Whether store operations are traced (`record_store_spans`)."""
    return _recording


@contextmanager
def store_span(operation: str) -> Generator[None]:
    """A span `store.<operation>` around the block, if recording; an exception leaves it with an error status."""
    if not _recording:
        yield
        return
    with tracer.start_as_current_span(
        f"store.{operation}", kind=SpanKind.CLIENT, attributes={"durable_chat.store.operation": operation}
    ):
        yield


def traced(operation: str) -> Callable[[Operation[P, R]], Operation[P, R]]:
    """Run the decorated coroutine function in a span `store.<operation>`.

    An exception leaves the span with an error status and an exception event, and propagates.
    """

    def decorate(function: Operation[P, R]) -> Operation[P, R]:
        @functools.wraps(function)
        async def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
            if not _recording:
                return await function(*args, **kwargs)
            with store_span(operation):
                return await function(*args, **kwargs)

        return wrapper

    return decorate


async def run_trace_id(engine: AsyncEngine, run_id: str) -> str | None:
    """The trace id of the latest attempt of run `run_id` (`None` if it was never traced).

    Raises:
        NotFound: No such run.
    """
    runs = metadata.tables[RunRow.__tablename__]
    with translate_errors(f"reading run {run_id!r}"):
        async with reader(engine).connect() as connection:
            row = (
                await connection.execute(sa.select(runs.c.trace_id).where(runs.c.run_id == run_id))
            ).one_or_none()
    if row is None:
        raise NotFound(f"no run {run_id!r}")
    return row[0]
