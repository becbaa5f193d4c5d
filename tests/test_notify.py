"""Cross-process delivery on PostgreSQL: a storing transaction notifies, another engine's listener relays.

Two `Database` objects on one database are two processes' views (separate engines and pools). The
listener of one of them is the only way events the other stores can reach its followers here:
the streams below never read the log on a timer.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import pytest
from hypothesis import example, given
from hypothesis import strategies as st
from inline_snapshot import snapshot
from sqlalchemy.engine import make_url

from agent.eventlog import new_events
from store import Database, EventListener, EventNotice
from store.notifications import parse_notice
from stream import RunStarted, StoredEvent, TextDelta, TextDone
from web.following import event_frames
from worker import Broker, Relay

from .conftest import new_database

pytestmark = [pytest.mark.anyio, pytest.mark.postgres]

DEADLINE = 20.0


@asynccontextmanager
async def two_processes(tmp_path: Path) -> AsyncIterator[tuple[Database, Database]]:
    async with new_database("postgresql", tmp_path) as url:
        here = await Database.connect(url)
        try:
            there = await Database.connect(url, migrate=False)
            try:
                yield here, there
            finally:
                await there.aclose()
        finally:
            await here.aclose()


@asynccontextmanager
async def listening(
    db: Database, broker: Broker, *, url: str | None = None, ping_seconds: float = 10.0
) -> AsyncIterator[EventListener]:
    relay = Relay(db.events, broker)
    listener = EventListener(
        db.engine.url if url is None else make_url(url),
        on_notice=relay.notice,
        on_connected=relay.catch_up,
        max_backoff=0.2,
        ping_seconds=ping_seconds,
    )
    listener.start()
    try:
        with anyio.fail_after(DEADLINE):
            await listener.wait_connected()
        yield listener
    finally:
        await listener.aclose()
        await relay.aclose()


async def store_events(db: Database, thread_id: str, *texts: str) -> None:
    """What a run on another process does: reserve ids, then store its events in one transaction."""
    first = await db.events.reserve(thread_id, len(texts))
    events = [
        StoredEvent(first + offset, TextDelta(run_id="r1", part_id="p", delta=text))
        for offset, text in enumerate(texts)
    ]
    await db.events.insert(thread_id, new_events(events))


async def eventually(condition: Callable[[], bool]) -> None:
    """Wait until `condition()` holds, failing the test after a generous deadline."""
    with anyio.fail_after(DEADLINE):
        while True:
            if condition():
                return
            await anyio.sleep(0.01)


def frame_summary(frame: bytes) -> tuple[int, str]:
    found = re.match(rb"id: (\d+)\nevent: (\w+)\n", frame)
    assert found is not None, frame
    return int(found[1]), found[2].decode()


async def test_events_another_process_stores_reach_a_stream_here(tmp_path: Path) -> None:
    async with two_processes(tmp_path) as (here, there):
        thread = await here.threads.create(user_id="u")
        broker = Broker()
        async with listening(here, broker):
            # An hour between reads of the log: only a notification can bring the events in time.
            frames = event_frames(here, broker, thread.thread_id, after=0, poll_seconds=3600)
            received: list[tuple[int, str]] = []

            async def follow() -> None:
                async for chunk in frames:
                    # One chunk per batch: the frames of the events stored together, in one write.
                    received.extend(frame_summary(frame + b"\n\n") for frame in chunk.split(b"\n\n")[:-1])
                    if len(received) == 5:
                        return

            async with anyio.create_task_group() as tasks:
                tasks.start_soon(follow)
                await eventually(lambda: broker.followers(thread.thread_id) > 0)
                await store_events(there, thread.thread_id, "one", "two", "three")
                await store_events(there, thread.thread_id, "four", "five")
                await eventually(lambda: len(received) == 5)
            await frames.aclose()
    assert received == snapshot(
        [(1, "text_delta"), (2, "text_delta"), (3, "text_delta"), (4, "text_delta"), (5, "text_delta")]
    )


async def test_a_notice_costs_a_read_only_when_a_follower_here_lacks_its_events(tmp_path: Path) -> None:
    async with two_processes(tmp_path) as (here, _there):
        broker = Broker()
        relay = Relay(here.events, broker)
        thread = await here.threads.create(user_id="u")
        # Nobody follows the thread here: nothing to do.
        relay.notice(EventNotice(thread.thread_id, 3))
        assert relay.reads == 0
        with broker.subscribe(thread.thread_id, after=0) as follower:
            # This process published the events itself (its own run's notice came back).
            assert await here.events.reserve(thread.thread_id, 3) == 1
            broker.publish(
                thread.thread_id, [StoredEvent(i, RunStarted(run_id="r", kind="message")) for i in (1, 2, 3)]
            )
            relay.notice(EventNotice(thread.thread_id, 3))
            assert relay.reads == 0
            # Stored elsewhere and new here: read, once, and published after what the follower has.
            first = await here.events.reserve(thread.thread_id, 4)
            stored = [
                StoredEvent(first + i, TextDone(run_id="r", part_id="p", text=str(i))) for i in range(2)
            ]
            await here.events.insert(thread.thread_id, new_events(stored))
            relay.notice(EventNotice(thread.thread_id, first + 1))
            relay.notice(EventNotice(thread.thread_id, first + 1))
            with anyio.fail_after(DEADLINE):
                batch = await follower.next_batch()
                while len(batch) < 5:
                    batch += await follower.next_batch()
            await relay.aclose()
        assert [stored.event_id for stored in batch] == [1, 2, 3, 4, 5]
        assert 1 <= relay.reads <= 2


async def test_a_process_never_reads_back_what_its_own_transactions_notified(tmp_path: Path) -> None:
    # This process publishes its own events once they commit; its notice, which may arrive first,
    # costs no read. Another process's notice still does.
    async with two_processes(tmp_path) as (here, there):
        thread = await here.threads.create(user_id="u")
        broker = Broker()
        relay = Relay(here.events, broker)
        listener = EventListener(here.engine.url, on_notice=relay.notice, on_connected=lambda: None)
        listener.start()
        try:
            with anyio.fail_after(DEADLINE):
                await listener.wait_connected()
            with broker.subscribe(thread.thread_id, after=0) as follower:
                await store_events(here, thread.thread_id, "mine")
                await store_events(there, thread.thread_id, "theirs")
                with anyio.fail_after(DEADLINE):
                    batch = await follower.next_batch()
                    while not any(stored.event_id == 2 for stored in batch):
                        batch += await follower.next_batch()
        finally:
            await listener.aclose()
            await relay.aclose()
    # Notices arrive in commit order: the first, this process's own, was dropped unread. The read
    # the second one caused brought both (the first was never published here).
    assert relay.reads == 1
    assert [stored.event_id for stored in batch] == [1, 2]


async def test_a_listener_that_reconnects_catches_up_on_what_it_missed(tmp_path: Path) -> None:
    async with two_processes(tmp_path) as (here, there):
        thread = await here.threads.create(user_id="u")
        url = here.engine.url
        proxy = TcpProxy(url.host or "127.0.0.1", url.port or 5432)
        port = await proxy.start()
        broker = Broker()
        through_proxy = url.set(host="127.0.0.1", port=port).render_as_string(hide_password=False)
        try:
            async with listening(here, broker, url=through_proxy) as listener:
                with broker.subscribe(thread.thread_id, after=0) as follower:
                    await store_events(there, thread.thread_id, "before")
                    with anyio.fail_after(DEADLINE):
                        assert [e.event_id for e in await follower.next_batch()] == [1]
                    proxy.cut()
                    await eventually(lambda: not listener.connected)
                    # Notified while nobody listens: this notification is lost.
                    await store_events(there, thread.thread_id, "during", "the", "outage")
                    proxy.restore()
                    with anyio.fail_after(DEADLINE):
                        caught_up = await follower.next_batch()
                    assert listener.connections == 2
        finally:
            await proxy.aclose()
    assert [(e.event_id, e.event.type) for e in caught_up] == snapshot(
        [(2, "text_delta"), (3, "text_delta"), (4, "text_delta")]
    )


async def test_a_listener_whose_connection_goes_silent_reconnects_and_catches_up(tmp_path: Path) -> None:
    async with two_processes(tmp_path) as (here, there):
        thread = await here.threads.create(user_id="u")
        url = here.engine.url
        proxy = TcpProxy(url.host or "127.0.0.1", url.port or 5432)
        port = await proxy.start()
        broker = Broker()
        through_proxy = url.set(host="127.0.0.1", port=port).render_as_string(hide_password=False)
        try:
            async with listening(here, broker, url=through_proxy, ping_seconds=0.3) as listener:
                with broker.subscribe(thread.thread_id, after=0) as follower:
                    # A network failure that closes nothing: the connection just stops answering.
                    proxy.freeze()
                    await store_events(there, thread.thread_id, "unheard", "notice")
                    with anyio.fail_after(DEADLINE):
                        caught_up = await follower.next_batch()
                    assert listener.connections == 2
        finally:
            await proxy.aclose()
    assert [e.event_id for e in caught_up] == [1, 2]


@example("thread \u00b2")  # a digit to `str.isdigit`, not to `int`
@given(st.text(max_size=80))
def test_any_payload_is_a_notice_or_ignored(payload: str) -> None:
    notice = parse_notice(payload)
    if notice is not None:
        assert parse_notice(f"{notice.thread_id} {notice.event_id}") == notice


@given(st.uuids(), st.integers(min_value=0, max_value=2**62))
def test_a_notice_survives_its_payload(thread: object, event_id: int) -> None:
    assert parse_notice(f"{thread} {event_id}") == EventNotice(str(thread), event_id)


class TcpProxy:
    """A TCP relay to PostgreSQL whose connections the test cuts, refusing new ones until restored."""

    def __init__(self, host: str, port: int) -> None:
        self._target = (host, port)
        self._server: asyncio.Server | None = None
        self._streams: list[asyncio.StreamWriter] = []
        self._refusing = False
        self._generation = 0

    async def start(self) -> int:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        port: int = self._server.sockets[0].getsockname()[1]
        return port

    def cut(self) -> None:
        self._refusing = True
        for writer in self._streams:
            writer.transport.abort()
        self._streams.clear()

    def restore(self) -> None:
        self._refusing = False

    def freeze(self) -> None:
        """Stop relaying on the open connections, silently (new ones still work)."""
        self._generation += 1

    async def aclose(self) -> None:
        self.cut()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    async def _accept(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        if self._refusing:
            client_writer.transport.abort()
            return
        server_reader, server_writer = await asyncio.open_connection(*self._target)
        self._streams += [client_writer, server_writer]
        generation = self._generation

        def live() -> bool:
            return generation == self._generation

        await asyncio.gather(
            _pipe(client_reader, server_writer, live), _pipe(server_reader, client_writer, live)
        )


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, live: Callable[[], bool]) -> None:
    try:
        while data := await reader.read(65536):
            if live():
                writer.write(data)
                await writer.drain()
    except ConnectionError:
        pass
    finally:
        writer.transport.abort()
