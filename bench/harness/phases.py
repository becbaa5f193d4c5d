"""Phases of `bench.web` (and `--workers`): a system on fresh servers at one level of users, one
phase after another within a time budget, a phase that cannot run noted rather than fatal."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.engine import make_url
from sqlalchemy.exc import SQLAlchemyError

from .clients import Load, LoadResult, Measured, measure, run_load, trouble_lines
from .databases import connected, scratch_database
from .servers import ServerProcess, bare_sse_argv, ours_argv, server_env, serving
from .stats import median, ms_short, percentile

__all__ = ("BASELINE", "Phase", "Plan", "errors", "find", "run_phase", "run_plan")

BASELINE = "baseline"
"""The store-nothing SSE app (`bench.harness.bare_sse`); any other system is ours on that database."""


@dataclass
class Phase:
    """One system (`baseline`, `SQLite` or `PostgreSQL`) on `workers` servers at one level of users."""

    system: str
    workers: int
    measured: Measured
    idle_rss_kb: int = 0
    peak_rss_kb: int = 0
    """The (first) server's resident memory before the load and at its peak."""
    alone: list[float] = field(default_factory=list[float])
    """First-delta latencies of one user alone on the server, before the load."""
    connections: int = 0
    """The most connections the database had at once (PostgreSQL only, when counted)."""
    trouble: list[str] = field(default_factory=list[str])
    statuses: dict[str, int] = field(default_factory=dict[str, int])

    @property
    def load(self) -> LoadResult:
        return self.measured.result

    @property
    def label(self) -> str:
        return f"{self.system}{f' x{self.workers}' if self.workers > 1 else ''}, {self.load.users} users"


def find(phases: Sequence[Phase], system: str, users: int, workers: int = 1) -> Phase | None:
    return next((p for p in phases if (p.system, p.workers, p.load.users) == (system, workers, users)), None)


async def _count_connections(server: str, database: str, peak: list[int]) -> None:
    """Sample how many connections the database has (every worker's pools), keeping the peak."""
    async with connected(server) as admin:
        while True:
            query = sa.text("SELECT count(*) FROM pg_stat_activity WHERE datname = :name")
            peak[0] = max(peak[0], int(await admin.scalar(query, {"name": database}) or 0))
            await asyncio.sleep(0.25)


async def run_phase(
    system: str,
    users: int,
    turns: int,
    deadline: float,
    *,
    postgres: str | None,
    logs: Path,
    source: Path,
    workers: int = 1,
    alone_turns: int = 0,
    pool_connections: int | None = None,
) -> Phase:
    """Fresh servers (and database) warmed up by a turn each, one user's `alone_turns` on the first,
    then `users` users' `turns` each, spread over the servers round robin.

    `pool_connections`: the PostgreSQL connections all the servers keep together, split evenly
    (`DURABLE_CHAT_POOL_SIZE`, two pools each), and the database's connections counted meanwhile.
    """
    tag, peak = f"{system}-{workers}w-{users}u", [0]
    async with AsyncExitStack() as stack:
        database = "PostgreSQL" if system == "PostgreSQL" else "SQLite"
        url = await stack.enter_async_context(scratch_database(database, logs, tag, postgres))
        argv = bare_sse_argv() if system == BASELINE else ours_argv(url)
        pool = (
            {}
            if pool_connections is None
            else {"DURABLE_CHAT_POOL_SIZE": str(max(2, pool_connections // workers // 2))}
        )
        environment = server_env(pool)

        async def serve(n: int) -> ServerProcess:
            return await stack.enter_async_context(serving(f"{tag}-{n}", argv, environment, logs, cwd=source))

        # The first alone, so that only one process creates the schema.
        servers = [await serve(0), *await asyncio.gather(*(serve(n) for n in range(1, workers)))]
        before = [await run_load(server.base_url, Load(users=1, turns=1, deadline=60)) for server in servers]
        alone = LoadResult(1, alone_turns)
        if alone_turns:
            alone = await run_load(servers[0].base_url, Load(users=1, turns=alone_turns, deadline=60))
            await asyncio.sleep(0.5)
        idle = servers[0].status("VmRSS") or 0
        counting = pool_connections is not None and system == "PostgreSQL"
        name = str(make_url(url).database)
        sampler = asyncio.create_task(_count_connections(postgres or "", name, peak)) if counting else None
        try:
            measured = await measure(servers, Load(users=users, turns=turns, deadline=deadline))
        finally:
            if sampler is not None:
                sampler.cancel()
                await asyncio.gather(sampler, return_exceptions=True)
        high = servers[0].status("VmHWM") or 0
    phase = Phase(system, workers, measured, idle, high, alone.first_delta, peak[0])
    for warm in before:
        measured.result.add_errors(warm, "warm-up: ")
    measured.result.add_errors(alone, "alone: ")
    for server in servers:
        trouble, statuses = server.trouble()
        phase.trouble += trouble
        for status, count in statuses.items():
            phase.statuses[status] = phase.statuses.get(status, 0) + count
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


@dataclass(frozen=True)
class Plan:
    """Phases to run in order, (users, system, workers) each, within `budget` seconds."""

    phases: Sequence[tuple[int, str, int]]
    budget: float
    turns: dict[int, int]
    """Turns per user at each level of users (`default_turns` elsewhere), unless `--turns`."""
    default_turns: int
    seconds_per_turn: float
    """How long a phase's turns may take, per turn, before they are cut (as errors)."""
    alone_turns: int = 0
    pool_connections: int | None = None


async def run_plan(
    plan: Plan, turns: int | None, failures: list[str], *, postgres: str | None, logs: Path, source: Path
) -> list[Phase]:
    """Every phase of `plan`, each cut to leave 15 s to every later one within the budget."""
    phases: list[Phase] = []
    budget_end = time.monotonic() + plan.budget
    for number, (users, system, workers) in enumerate(plan.phases):
        each = turns or plan.turns.get(users, plan.default_turns)
        if number == 0 or plan.phases[number - 1][0] != users:
            print(f"{users} concurrent users, {each} turns each:", flush=True)
        left = budget_end - time.monotonic() - 15 * (len(plan.phases) - number - 1)
        deadline = max(20.0, min(users * each * plan.seconds_per_turn, left))
        try:
            found = await run_phase(
                system,
                users,
                each,
                deadline,
                postgres=postgres,
                logs=logs,
                source=source,
                workers=workers,
                alone_turns=plan.alone_turns,
                pool_connections=plan.pool_connections,
            )
            phases.append(found)
        except (RuntimeError, OSError, SQLAlchemyError) as error:
            label = f"{system}{f' x{workers}' if workers > 1 else ''}, {users} users"
            print(f"  {label}: FAILED: {error}", flush=True)
            failures.append(f"{label}: {str(error)[-600:]}")
    return phases


def errors(phases: Sequence[Phase], failures: Sequence[str], heading: str) -> list[str]:
    """What went wrong in the phases, and the phases that could not run, under `heading`."""
    out = [line for p in phases for line in trouble_lines(p.label, p.load, p.statuses, p.trouble)]
    out += [f"- could not run: `{failure}`" for failure in failures]
    return ["", heading, "", *out] if out else []
