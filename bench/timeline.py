"""Where one user's first delta goes: an in-process timeline of the demo turn, on SQLite and PostgreSQL.

    python -m bench.timeline [--turns 40] [--postgres URL] [--no-postgres]

The server's app (the demo shop on its demo model) runs in this process, its runner going; one user
alone posts "Where is ORD-5678?" on a new thread and waits for the run's end, `--turns` times on
each of two sides, in alternating blocks: the shop as it is, its lookup read-only
(`ChatApp.read_only_tools`), and with no read-only tools, the lookup checkpointed before it runs.
The store calls on the first delta's path, the events the run emits and their publication are timed
from the POST (classes wrapped for the benchmark only), and each mark's median printed: the
queueing's transaction, the first checkpoint (before the tool, or the run's end when the lookup's
step waits for it), the first word's own transaction, and the CPU work between them. Nothing
crosses a socket but the database's: the HTTP and SSE costs of `bench.cpu`'s first delta are not in
it. Prints; writes nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
from pydantic_ai import models

from agent import DEFAULT_APP, EventLogSink, load_app
from bench.cpu import prepare
from bench.web import POSTGRES_ENV, postgres_database
from store import EventLog, Runs, SqlConversationStore
from stream import RunFinished, StoredEvent
from web import Settings, create_app, issue_token
from web.broker import Broker

SECRET = "timeline-secret-of-32-characters!"
READ_ONLY = "the lookup read-only (as the shop declares it)"
CHECKPOINTED = "the lookup checkpointed before it runs"
BLOCKS = 4
"""Each side's turns come in this many blocks, the sides alternating."""
PROMPT = "Where is ORD-5678?"


class _Marks:
    """Named times from the turn's POST (ms): the first of each name, and how long each timed call took."""

    def __init__(self) -> None:
        self.start = 0.0
        self.first: dict[str, float] = {}
        self.calls: dict[str, list[float]] = {}

    def reset(self) -> None:
        self.start, self.first, self.calls = time.perf_counter(), {}, {}

    def mark(self, name: str) -> None:
        self.first.setdefault(name, (time.perf_counter() - self.start) * 1000)

    def timed(self, name: str, started: float) -> None:
        self.mark(f"{name} done")
        self.calls.setdefault(name, []).append((time.perf_counter() - started) * 1000)


def _wrap(owner: type, attribute: str, marks: _Marks, name: str) -> Callable[[], None]:
    """Time `owner.attribute` (a coroutine method) as `name`; returns how to undo it."""
    original: Callable[..., Awaitable[Any]] = getattr(owner, attribute)

    async def timed(self: object, *args: Any, **named: Any) -> Any:
        marks.mark(f"{name} starts")
        started = time.perf_counter()
        try:
            return await original(self, *args, **named)
        finally:
            marks.timed(name, started)

    setattr(owner, attribute, timed)
    return lambda: setattr(owner, attribute, original)


def _instrument(marks: _Marks) -> list[Callable[[], None]]:
    undo = [
        _wrap(Runs, "queue", marks, "queueing"),
        _wrap(SqlConversationStore, "save_with", marks, "checkpoint"),
        _wrap(EventLog, "insert", marks, "event write"),
    ]
    emit = EventLogSink.emit
    publish = Broker.publish

    async def emitted(self: EventLogSink, event: Any) -> None:
        marks.mark(f"{type(event).__name__} emitted")
        await emit(self, event)

    def published(self: Broker, thread_id: str, events: Sequence[StoredEvent]) -> None:
        for stored in events:
            marks.mark(f"{type(stored.event).__name__} published")
        publish(self, thread_id, events)

    EventLogSink.emit = emitted  # type: ignore[method-assign]
    Broker.publish = published  # type: ignore[method-assign]
    undo.append(lambda: setattr(EventLogSink, "emit", emit))
    undo.append(lambda: setattr(Broker, "publish", publish))
    return undo


_ROWS = (
    ("queueing starts", "the POST's queueing statement sent"),
    ("queueing done", "queued (and claimed): committed"),
    ("ToolCall emitted", "the model's tool call emitted"),
    ("checkpoint starts", "the first checkpoint sent (before the tool; the run's end when it waits)"),
    ("checkpoint done", "that checkpoint committed"),
    ("ToolResult emitted", "the tool's result emitted"),
    ("TextDelta emitted", "the first word emitted"),
    ("event write starts", "its transaction sent"),
    ("event write done", "committed"),
    ("TextDelta published", "the first word published (the first delta)"),
    ("RunFinished published", "the run's end published"),
)


Timings = tuple[dict[str, list[float]], dict[str, list[float]]]
"""Each mark's times, and each store call's durations, over the turns."""


async def _turns(url: str, data_dir: Path, turns: int, *, read_only: bool) -> Timings:
    """The demo turn `turns` times on a prepared database, its lookup read-only as the shop declares it, or checkpointed."""
    shop = load_app(DEFAULT_APP)
    app = create_app(
        Settings(
            database_url=url,
            secret=SECRET,
            data_dir=data_dir,
            model="demo",
            rate_limit_burst=1e6,
            messages_per_minute=1_000_000,
        ),
        app=shop if read_only else replace(shop, read_only_tools=()),
    )
    marks = _Marks()
    times: dict[str, list[float]] = {}
    calls: dict[str, list[float]] = {}
    undo = _instrument(marks)
    try:
        async with app.router.lifespan_context(app):
            broker: Broker = app.state.services.broker
            headers = {"authorization": f"Bearer {issue_token(SECRET, 'timeline')}"}
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(
                transport=transport, base_url="http://timeline", headers=headers
            ) as client:
                for turn in range(turns + 2):  # two to warm up
                    made = await client.post("/api/threads", json={})
                    thread_id = made.json()["thread_id"]
                    with broker.subscribe(thread_id) as followed:
                        marks.reset()
                        posted = await client.post(
                            f"/api/threads/{thread_id}/messages", json={"content": PROMPT}
                        )
                        assert posted.status_code == 202, posted.text
                        while not any(isinstance(s.event, RunFinished) for s in await followed.next_batch()):
                            pass
                    assert "TextDelta published" in marks.first, "the turn published no text"
                    if turn >= 2:
                        for name, value in marks.first.items():
                            times.setdefault(name, []).append(value)
                        for name, values in marks.calls.items():
                            calls.setdefault(name, []).extend(values)
    finally:
        for restore in undo:
            restore()
    return times, calls


def _report(title: str, sides: dict[str, Timings]) -> list[str]:
    """Each side's marks in the order they came, then its store calls."""
    lines: list[str] = []
    for side, (times, calls) in sides.items():
        lines += [
            f"{title}, {side}: median ms from the POST, {len(times.get('queueing starts', []))} turns",
            "",
        ]
        lines += ["| mark | ms | since the row before |", "|---|---:|---:|"]
        rows = sorted(((statistics.median(times[name]), label) for name, label in _ROWS if name in times))
        before = 0.0
        for at, label in rows:
            lines.append(f"| {label} | {at:.2f} | {at - before:+.2f} |")
            before = at
        lines += ["", "| store call | calls a turn | median ms |", "|---|---:|---:|"]
        turns = max(len(times.get("queueing starts", [])), 1)
        for name, values in calls.items():
            lines.append(f"| {name} | {len(values) / turns:.1f} | {statistics.median(values):.2f} |")
        lines.append("")
    return lines


async def _both(url: str, data_dir: Path, turns: int) -> dict[str, Timings]:
    """The turn with its lookup read-only and checkpointed, in alternating blocks of a few turns."""
    await prepare(url)
    sides: dict[str, Timings] = {READ_ONLY: ({}, {}), CHECKPOINTED: ({}, {})}
    for _ in range(BLOCKS):
        for side in sides:
            times, calls = await _turns(url, data_dir, max(turns // BLOCKS, 1), read_only=side == READ_ONLY)
            for into, got in zip(sides[side], (times, calls), strict=True):
                for name, values in got.items():
                    into.setdefault(name, []).extend(values)
    return sides


async def main(arguments: argparse.Namespace) -> None:
    models.ALLOW_MODEL_REQUESTS = False
    directory = Path(tempfile.mkdtemp(prefix="bench-timeline-"))
    out = _report(
        "SQLite", await _both(f"sqlite+aiosqlite:///{directory / 'timeline.db'}", directory, arguments.turns)
    )
    if arguments.postgres:
        async with postgres_database(arguments.postgres) as url:
            out += _report("PostgreSQL", await _both(url, directory, arguments.turns))
    print("\n".join(out))


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.timeline", description=(__doc__ or "").split("\n")[0]
    )
    parser.add_argument("--turns", type=int, default=40)
    parser.add_argument("--postgres", metavar="URL", default=os.environ.get(POSTGRES_ENV))
    parser.add_argument("--no-postgres", dest="postgres", action="store_const", const=None)
    return parser.parse_args()


if __name__ == "__main__":
    asyncio.run(main(parse()))
