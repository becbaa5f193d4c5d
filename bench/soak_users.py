"""`bench.soak`'s users: they chat, decide approvals and drop their streams, for minutes.

Every (re)connection resumes with `Last-Event-ID`; every stream is checked for ids that go backwards
or repeat; what goes wrong is counted by kind, with a sample each.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import httpx

from bench.harness.clients import sse_events

__all__ = ("Soak", "Tally", "run_users")

PROMPTS = (
    "Please refund ORD-3456",
    "Please refund ORD-5678",
    "Cancel ORD-9012 and ORD-3456",
    "Where is ORD-5678?",
    "What is your warranty?",
    "hello",
)
_STALL_SECONDS = 60.0
_THREAD_CYCLES = 10
"""A user starts a new thread every this many cycles: conversations stay short, threads pile up."""


@dataclass(frozen=True)
class Soak:
    users: int
    think_seconds: float
    drop_probability: float = 0.3


@dataclass
class Tally:
    """What the users did and saw so far (read by the sampler while they run)."""

    runs: Counter[str] = field(default_factory=Counter[str])
    """Finished runs by `run_finished` status."""
    approved: int = 0
    rejected: int = 0
    streams: int = 0
    reconnects: int = 0
    """Streams dropped by the client mid-run and reopened with `Last-Event-ID`."""
    threads: int = 0
    errors: Counter[str] = field(default_factory=Counter[str])
    samples: dict[str, str] = field(default_factory=dict[str, str])

    @property
    def turns(self) -> int:
        return sum(self.runs.values())

    def error(self, kind: str, sample: object) -> None:
        self.errors[kind] += 1
        self.samples.setdefault(kind, str(sample)[:300])


async def run_users(base_url: str, tokens: list[str], soak: Soak, deadline: float, tally: Tally) -> None:
    """Every user's loop, until `deadline` (`time.monotonic()`); each finishes the cycle it is in."""
    limits = httpx.Limits(max_connections=4 * len(tokens), max_keepalive_connections=2 * len(tokens))
    async with httpx.AsyncClient(base_url=base_url, timeout=30, limits=limits) as client:
        users = (
            _user(client, token, soak, deadline, tally, random.Random(n)) for n, token in enumerate(tokens)
        )
        await asyncio.gather(*users)


async def _user(
    client: httpx.AsyncClient, token: str, soak: Soak, deadline: float, tally: Tally, rng: random.Random
) -> None:
    auth = {"Authorization": f"Bearer {token}"}
    thread_id, last, cycle = "", 0, 0
    while time.monotonic() < deadline:
        try:
            if cycle % _THREAD_CYCLES == 0:
                created = await client.post("/api/threads", json={"title": "soak"}, headers=auth)
                created.raise_for_status()
                thread_id, last = created.json()["thread_id"], 0
                tally.threads += 1
            cycle += 1
            content = {"content": rng.choice(PROMPTS)}
            posted = await client.post(f"/api/threads/{thread_id}/messages", json=content, headers=auth)
            posted.raise_for_status()
            run_id: str | None = posted.json()["run_id"]
            while run_id is not None:
                drop = rng.random() < soak.drop_probability
                last, finished = await _follow(client, auth, thread_id, last, run_id, drop, tally)
                tally.runs[str(finished.get("status"))] += 1
                run_id = await _decide(client, auth, thread_id, finished, tally, rng)
        except (httpx.HTTPError, KeyError, ValueError, TimeoutError) as error:
            tally.error(type(error).__name__, error)
            cycle = 0  # start afresh on a new thread
        await asyncio.sleep(rng.uniform(0.5, 1.5) * soak.think_seconds)


async def _follow(
    client: httpx.AsyncClient,
    auth: dict[str, str],
    thread_id: str,
    last: int,
    run_id: str,
    drop: bool,
    tally: Tally,
) -> tuple[int, dict[str, Any]]:
    """Follow the thread's events after `last` until `run_id` finishes; the last id and its `run_finished`."""
    async with asyncio.timeout(_STALL_SECONDS):
        while True:
            tally.streams += 1
            headers = {**auth, "Last-Event-ID": str(last)}
            async with client.stream("GET", f"/api/threads/{thread_id}/events", headers=headers) as stream:
                stream.raise_for_status()
                async for event in sse_events(stream.aiter_lines()):
                    event_id = event.event_id or 0
                    if event_id <= last:
                        tally.error("event_id_repeated", f"{event_id} after {last} in {thread_id}")
                    last = max(last, event_id)
                    if event.data.get("run_id") != run_id:
                        continue
                    if event.type == "run_finished":
                        return last, event.data
                    if drop and event.type in {"text_delta", "tool_call"}:
                        drop = False
                        tally.reconnects += 1
                        break  # hang up mid-run; reconnect with Last-Event-ID
                else:
                    raise ValueError(f"the stream of {thread_id} ended before run {run_id} finished")


async def _decide(
    client: httpx.AsyncClient,
    auth: dict[str, str],
    thread_id: str,
    finished: dict[str, Any],
    tally: Tally,
    rng: random.Random,
) -> str | None:
    """Decide every pending call of a paused run at random; the resumed run's id, if one started."""
    if finished.get("status") != "awaiting_approval":
        return None
    pending = (await client.get(f"/api/threads/{thread_id}", headers=auth)).json()["pending_approvals"]
    resumed: str | None = None
    for approval in pending:
        base = f"/api/threads/{thread_id}/tool-calls/{approval['tool_call_id']}"
        if rng.random() < 0.5:
            answer = await client.post(f"{base}/approve", json={}, headers=auth)
            tally.approved += 1
        else:
            answer = await client.post(f"{base}/reject", json={"reason": "soak says no"}, headers=auth)
            tally.rejected += 1
        answer.raise_for_status()
        resumed = answer.json()["run_id"] or resumed
    return resumed
