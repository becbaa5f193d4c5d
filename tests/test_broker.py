"""The in-process broker: fan-out per thread, and a slow follower dropped rather than waited for."""

from __future__ import annotations

import pytest

from stream import RunStarted, StoredEvent
from worker import Broker, SubscriberDropped

pytestmark = pytest.mark.anyio


def events(*ids: int) -> list[StoredEvent]:
    return [StoredEvent(i, RunStarted(run_id="r", kind="message")) for i in ids]


async def test_followers_of_a_thread_get_its_events_only() -> None:
    broker = Broker()
    with broker.subscribe("t1") as first, broker.subscribe("t1") as second, broker.subscribe("t2") as other:
        broker.publish("t1", events(1, 2))
        broker.publish("t1", events(3))
        assert [e.event_id for e in await first.next_batch()] == [1, 2, 3]
        assert [e.event_id for e in await second.next_batch()] == [1, 2, 3]
        assert not other.dropped
        assert broker.followers("t1") == 2
    assert broker.followers("t1") == 0


async def test_a_follower_that_falls_behind_is_dropped_and_publishing_goes_on() -> None:
    broker = Broker(capacity=3)
    with broker.subscribe("t") as slow, broker.subscribe("t") as fast:
        broker.publish("t", events(1, 2))
        assert [e.event_id for e in await fast.next_batch()] == [1, 2]
        broker.publish("t", events(3, 4))
        assert slow.dropped
        with pytest.raises(SubscriberDropped):
            await slow.next_batch()
        assert [e.event_id for e in await fast.next_batch()] == [3, 4]
        assert broker.followers("t") == 1


async def test_a_thread_nobody_follows_costs_no_memory() -> None:
    # Every published event is stored already: the broker keeps nothing for threads nobody follows,
    # so a server's memory follows its open streams, not the threads ever active.
    broker = Broker()
    for n in range(2_000):
        broker.publish(f"t{n}", events(1, 2, 3))
    assert broker.remembered() == 0
    with broker.subscribe("t7") as follower:
        broker.publish("t7", events(4))
        # A new follower gets only what is published after it subscribed; the log has the rest.
        assert [e.event_id for e in await follower.next_batch()] == [4]
        assert broker.remembered() == 1
    # Its last follower gone, the thread is forgotten, newest id included.
    assert broker.remembered() == 0
    assert broker.newest("t7") is None


async def test_the_broker_stays_bounded_by_its_followers_after_many_threads() -> None:
    broker = Broker()
    for n in range(1_000):
        with broker.subscribe(f"t{n}") as follower:
            broker.publish(f"t{n}", events(1, 2))
            assert len(await follower.next_batch()) == 2
        broker.publish(f"t{n}", events(3))
    assert broker.remembered() == 0
    assert broker.followed() == []


async def test_an_id_already_published_is_not_published_again() -> None:
    # The relay may read from the log events this process stored and published itself.
    broker = Broker()
    with broker.subscribe("t") as follower:
        broker.publish("t", events(1, 2, 3))
        broker.publish("t", events(2, 3, 4))
        broker.publish("t", events(3))
        assert [e.event_id for e in await follower.next_batch()] == [1, 2, 3, 4]
        assert broker.newest("t") == 4
    assert broker.newest("never") is None


async def test_the_position_to_read_from_covers_every_follower() -> None:
    broker = Broker()
    assert broker.position("t") is None
    with broker.subscribe("t", after=7) as ahead, broker.subscribe("t", after=3):
        # Each follower has up to its own position: the log is read after the lowest.
        assert broker.position("t") == 3
        assert broker.followed() == ["t"]
        # Whatever was published reached every follower, whatever its position says.
        broker.publish("t", events(5))
        assert broker.position("t") == 5
        ahead.position = 9
        assert broker.position("t") == 5
    assert broker.position("t") is None
    assert broker.followed() == []
