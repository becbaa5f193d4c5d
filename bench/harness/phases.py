"""Phases of `bench.web`: ours on a fresh server and database at one level of users, and what went wrong."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from pathlib import Path

from .clients import Load, LoadResult, Measured, measure, run_load, trouble_lines
from .databases import Dialect, scratch_database
from .servers import ours_argv, server_env, serving
from .stats import median, ms_short, percentile


@dataclass
class Phase:
    """Ours on one database (`SQLite` or `PostgreSQL`) at one level of users."""

    system: str
    measured: Measured
    idle_rss_kb: int = 0
    peak_rss_kb: int = 0
    """The server's resident memory before the load and at its peak."""
    alone: list[float] = field(default_factory=list[float])
    """First-delta latencies of one user alone on the server, before the load."""
    trouble: list[str] = field(default_factory=list[str])
    statuses: dict[str, int] = field(default_factory=dict[str, int])

    @property
    def load(self) -> LoadResult:
        return self.measured.result

    @property
    def label(self) -> str:
        return f"{self.system}, {self.load.users} users"


def find(phases: Sequence[Phase], system: str, users: int) -> Phase | None:
    return next((p for p in phases if (p.system, p.load.users) == (system, users)), None)


async def run_phase(
    system: Dialect,
    users: int,
    turns: int,
    deadline: float,
    postgres: str | None,
    logs: Path,
    source: Path,
    alone_turns: int,
) -> Phase:
    """A fresh server (and database) warmed up by a turn, one user's `alone_turns`, then `users` users'
    `turns` each."""
    tag = f"{system}-{users}u"
    async with AsyncExitStack() as stack:
        url = await stack.enter_async_context(scratch_database(system, logs, tag, postgres))
        server = await stack.enter_async_context(serving(tag, ours_argv(url), server_env(), logs, cwd=source))
        warm = await run_load(server.base_url, Load(users=1, turns=1, deadline=60))
        alone = LoadResult(1, alone_turns)
        if alone_turns:
            alone = await run_load(server.base_url, Load(users=1, turns=alone_turns, deadline=60))
            await asyncio.sleep(0.5)
        idle = server.status("VmRSS") or 0
        measured = await measure([server], Load(users=users, turns=turns, deadline=deadline))
        high = server.status("VmHWM") or 0
    phase = Phase(system, measured, idle, high, alone.first_delta)
    measured.result.add_errors(warm, "warm-up: ")
    measured.result.add_errors(alone, "alone: ")
    phase.trouble, phase.statuses = server.trouble()
    load = phase.load
    print(
        f"  {phase.label}: {load.completed_turns}/{users * turns} turns in {load.elapsed:.1f}s = "
        f"{load.turns_per_second:.1f}/s, first delta p50 {ms_short(median(load.first_delta))} p95 "
        f"{ms_short(percentile(load.first_delta, 0.95))} ms, {load.error_count} errors, streams "
        f"{load.streams_open}, server CPU {measured.server_cores:.2f} cores, client {measured.client_cores:.0%}, "
        f"machine {measured.machine_busy:.0%}",
        flush=True,
    )
    for kind, count in load.errors.items():
        print(f"    error {kind} x{count}: {load.error_samples[kind]}", flush=True)
    return phase


def errors(phases: Sequence[Phase], failures: Sequence[str], heading: str) -> list[str]:
    """What went wrong in the phases, and the phases that could not run, under `heading`."""
    out = [line for p in phases for line in trouble_lines(p.label, p.load, p.statuses, p.trouble)]
    out += [f"- could not run: `{failure}`" for failure in failures]
    return ["", heading, "", *out] if out else []
