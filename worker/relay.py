"""Events other processes store, relayed from the log to this process's followers when notified.

With several server processes on one PostgreSQL database, a follower connected here may follow
a thread whose run another process drives. That process's storing transactions notify
(`store.notifications`); this process's one listener hands each notice to `Relay.notice`.
Deliberate choices:

- **Only followed threads cost anything.** A notice for a thread nobody here follows, or one
  whose events this process published already, is dropped without touching the database.
- **Its own notices are dropped.** This process's storing transactions notify it too, and the
  notice may well arrive before the storing task, resumed after its commit, published the events
  here: a notice sent by one of this process's own connections is never read back.
- **One reader per thread.** Notices for a thread coalesce while its read is in flight: then
  one more read follows, after the newest id the broker has, so a burst of notices costs at most
  two reads, and the events are published in order.
- **No duplicates, none missed.** A read starts after `Broker.position` (what every follower
  has), and the broker drops ids it published already; a follower drops ids it has seen.
- **After the listener (re)connects**, every followed thread is read again: notifications sent
  while it was disconnected are lost.
"""

from __future__ import annotations

import asyncio
import logging

from agent import stored_events
from store import EventLog, EventNotice, StoreError

from .broker import Broker

__all__ = ("Relay",)

logger = logging.getLogger(__name__)

_PAGE = 500


class Relay:
    """Publishes to the broker the events the log has and its followers lack; see the module's notes."""

    def __init__(self, log: EventLog, broker: Broker) -> None:
        self._log = log
        self._broker = broker
        self._readers: dict[str, asyncio.Task[None]] = {}
        # A catch-up reads every followed thread at once: a few reads at a time leave the pool
        # to the requests and runs.
        self._reading = asyncio.Semaphore(4)
        self._again: set[str] = set()
        self.reads = 0
        """How many times the relay read the log (for tests and monitoring)."""

    def notice(self, notice: EventNotice) -> None:
        """Events of a thread up to `notice.event_id` are stored: relay them if a follower here lacks them."""
        if self._log.stored_here(notice):
            return  # stored by this process, which publishes them itself once they commit
        position = self._broker.position(notice.thread_id)
        if position is None or position >= notice.event_id:
            return
        self._read(notice.thread_id)

    def catch_up(self) -> None:
        """Read the log of every followed thread: notifications may have been missed."""
        for thread_id in self._broker.followed():
            self._read(thread_id)

    async def aclose(self) -> None:
        readers = list(self._readers.values())
        for task in readers:
            task.cancel()
        if readers:
            await asyncio.wait(readers)

    def _read(self, thread_id: str) -> None:
        if thread_id in self._readers:
            self._again.add(thread_id)
            return
        task = asyncio.create_task(self._relay(thread_id), name=f"relay {thread_id}")
        self._readers[thread_id] = task

    async def _relay(self, thread_id: str) -> None:
        try:
            while True:
                self._again.discard(thread_id)
                async with self._reading:
                    position = self._broker.position(thread_id)
                    if position is None:
                        return  # its followers left
                    self.reads += 1
                    logged = await self._log.read(thread_id, after=position, limit=_PAGE)
                self._broker.publish(thread_id, stored_events(logged))
                if len(logged) < _PAGE and thread_id not in self._again:
                    return
        except StoreError as error:
            # The followers' periodic read, or the catch-up after the listener reconnects, will
            # bring these events: the database is likely restarting.
            logger.warning("relaying the events of thread %s failed: %s", thread_id, error)
        finally:
            # No await between the last check and here: a notice arriving meanwhile finds no
            # reader and starts one.
            del self._readers[thread_id]
