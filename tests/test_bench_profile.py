"""`bench.profile`'s attribution of py-spy samples to issue 14's categories, and its share of CPU."""

from __future__ import annotations

import pytest

from bench.profile import render, share
from bench.profile_categories import (
    DRIVERS,
    GC,
    KERNEL,
    OTEL,
    OURS,
    PYDANTIC_AI,
    SQLALCHEMY,
    UNKNOWN,
    WEB,
    categorize,
    in_system_call,
    is_waiting,
    parse_raw,
)
from bench.profile_categories import LOOP as LOOP_CATEGORY

LOOP = "thread (10): MainThread"
ROOT = ["_run_module_as_main (<frozen runpy>:198)", "BaseEventLoop._run_once (asyncio/base_events.py:1922)"]


def test_the_first_frame_with_a_category_from_the_leaf_up_names_the_sample() -> None:
    # The standard library and pydantic go to their caller: the store's JSON is ours, not json's.
    store = [
        *ROOT,
        "run_step (agent/step.py:122)",
        "encode (store/codec.py:40)",
        "dumps (json/__init__.py:231)",
    ]
    assert categorize(LOOP, store) == OURS
    validated = [
        *ROOT,
        "_drive (agent/step.py:158)",
        "run (pydantic_ai/_agent_graph.py:10)",
        "x (pydantic/main.py:5)",
    ]
    assert categorize(LOOP, validated) == PYDANTIC_AI
    statement = [*ROOT, "save (store/conversations.py:9)", "execute (sqlalchemy/engine/base.py:1)"]
    assert categorize(LOOP, statement) == SQLALCHEMY
    http = [*ROOT, "run_asgi (uvicorn/protocols/http/h11_impl.py:1)", "send (starlette/responses.py:3)"]
    assert categorize(LOOP, http) == WEB
    spans = [*ROOT, "stream (pydantic_ai/_agent_graph.py:1)", "attrs (pydantic_ai/_instrumentation.py:1044)"]
    assert categorize(LOOP, spans) == OTEL
    native_sqlite = [*ROOT, "execute (aiosqlite/core.py:1)", "pysqlite_step (libsqlite3.so.0)"]
    assert categorize(LOOP, native_sqlite) == DRIVERS


def test_garbage_collection_and_other_threads_go_by_what_they_are() -> None:
    collecting = [*ROOT, "encode (store/codec.py:40)", "gc_collect_main (gcmodule.c:1200)"]
    assert categorize(LOOP, collecting) == GC
    worker = [
        "run (threading.py:975)",
        "_connection_worker_thread (aiosqlite/core.py:50)",
        "execute (libsqlite3.so)",
    ]
    assert categorize("thread (11): Thread-2 (_connection_worker_thread)", worker) == DRIVERS
    exporter = ["run (threading.py:975)", "export (agent/tracing.py:170)", "redact (agent/redaction.py:66)"]
    assert categorize("thread (12): OtelBatchSpanRecordProcessor", exporter) == OTEL


def test_blocked_samples_are_no_cpu_and_the_loop_threads_system_time_is_the_kernels() -> None:
    waiting = [
        *ROOT,
        "select (selectors.py:468)",
        "select_epoll_poll_impl (selectmodule.c)",
        "epoll_wait (libc.so.6)",
    ]
    assert is_waiting(waiting)
    raw = [
        f"{LOOP};{';'.join(waiting)} 50",
        f"{LOOP};{';'.join([*ROOT, 'encode (store/codec.py:40)'])} 30",
        f"{LOOP};{';'.join([*ROOT, 'run (pydantic_ai/_agent_graph.py:1)'])} 10",
        "thread (11): Thread-2 (_connection_worker_thread);run (threading.py:975);step (aiosqlite/core.py:1) 5",
    ]
    samples = parse_raw(raw)
    assert [count for _, _, count in samples] == [50, 30, 10, 5]
    # 0.4 s of the loop's user time shared 3:1 between ours and pydantic-ai; its 0.1 s system time is the
    # kernel's; the other threads' 0.5 s (1.0 in all, less the loop's) all the drivers'.
    assert share(samples, process=1.0, loop_user=0.4, loop_system=0.1) == pytest.approx(
        {
            KERNEL: 0.1,
            OURS: 0.3,
            PYDANTIC_AI: 0.1,
            DRIVERS: 0.5,
        }
    )


SITE = "/venv/lib/python3.11/site-packages"
LIB = "/python/lib/python3.11"
SERVED = [
    f"Server.run ({SITE}/uvicorn/server.py:86)",
    "_serve (/tmp/src/cli/main.py:155)",
    f"BaseEventLoop._run_once ({LIB}/asyncio/base_events.py:1922)",
    f"Handle._run ({LIB}/asyncio/events.py:80)",
]


def test_full_paths_name_packages_and_only_the_frames_the_loop_runs_count() -> None:
    # uvicorn and our cli started the loop: the loop's own work is not theirs.
    assert categorize(LOOP, SERVED) == LOOP_CATEGORY
    assert categorize(LOOP, [*SERVED, f"call_soon ({LIB}/asyncio/base_events.py:765)"]) == LOOP_CATEGORY
    assert (
        categorize(
            LOOP, [*SERVED, "run_step (/tmp/src/agent/step.py:122)", f"dumps ({LIB}/json/__init__.py:1)"]
        )
        == OURS
    )
    assert categorize(LOOP, [*SERVED, f"start_span ({SITE}/opentelemetry/sdk/trace/__init__.py:1)"]) == OTEL
    instrumented = [
        *SERVED,
        f"x ({SITE}/pydantic_ai/_agent_graph.py:1)",
        f"y ({SITE}/pydantic_ai/_instrumentation.py:1)",
    ]
    assert categorize(LOOP, instrumented) == OTEL
    assert categorize(LOOP, [f"Lock.acquire ({SITE}/anyio/_backends/_asyncio.py:2036)"]) == WEB
    assert categorize(LOOP, []) == UNKNOWN
    polling = [*SERVED[:3], f"EpollSelector.select ({LIB}/selectors.py:468)"]
    assert is_waiting(polling)
    assert categorize(LOOP, polling) == KERNEL


def test_samples_in_a_system_call_are_the_kernels_not_their_callers() -> None:
    write = [
        *SERVED,
        f"execute ({SITE}/asyncpg/connection.py:377)",
        f"_SelectorSocketTransport.write ({LIB}/asyncio/selector_events.py:1057)",
    ]
    assert in_system_call(write)
    assert not in_system_call([*SERVED, f"execute ({SITE}/asyncpg/connection.py:377)"])
    raw = [
        f"{LOOP};{';'.join(write)} 90",
        f"{LOOP};{';'.join([*SERVED, f'execute ({SITE}/asyncpg/connection.py:377)'])} 10",
    ]
    # The writes' 90 samples are left out: the loop's user time all goes to the driver's own 10.
    assert share(parse_raw(raw), process=0.5, loop_user=0.4, loop_system=0.1) == pytest.approx(
        {KERNEL: 0.1, DRIVERS: 0.4}
    )


@pytest.mark.parametrize(
    ("protocol", "api"),
    [
        ("native", "over the native API"),
        ("ai-sdk", "over the AI SDK endpoint (one POST a turn, the conversation resent)"),
    ],
)
def test_the_section_names_the_api_it_profiled(protocol: str, api: str) -> None:
    lines = render("SQLite", protocol, {"other": 0.001}, 0.002, 10, ["- Date: now"])
    assert lines[0] == "- Date: now"
    assert api in lines[1]
    assert lines[1].endswith("; 10 samples; total server CPU 2.0 ms per turn")
    assert lines[2:] == [
        "",
        "| category | ms per turn | share |",
        "|---|---:|---:|",
        "| other | 1.0 | 50% |",
    ]
