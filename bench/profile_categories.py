"""Where a py-spy sample of the server goes: issue 14's categories, one per sample.

The rules, and what a sample looks like, are in `docs/benchmarks.md` (the profile's method).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable

__all__ = ("CATEGORIES", "UNKNOWN", "attribute", "categorize", "in_system_call", "is_waiting", "parse_raw")

PYDANTIC_AI = "pydantic-ai's own run"
SQLALCHEMY = "SQLAlchemy (Core, ORM-less statements, greenlet bridge)"
DRIVERS = "database drivers (aiosqlite/sqlite3 threads, asyncpg)"
OTEL = "OpenTelemetry (spans recorded and exported, pydantic-ai's instrumentation)"
WEB = "uvicorn, h11/httptools, Starlette, sse-starlette"
KERNEL = "kernel: the loop thread's system time (socket I/O, epoll wake-ups)"
LOOP = "asyncio loop (its own scheduling, self-pipe wake-ups from threads)"
GC = "garbage collection"
OURS = "our own code (agent, store, stream, web, cli)"
OTHER = "other"
UNKNOWN = "unknown"
"""Samples with no Python frame (caught between frames), and the benchmark's own thread: left out."""
CATEGORIES = (PYDANTIC_AI, SQLALCHEMY, DRIVERS, OTEL, WEB, KERNEL, LOOP, GC, OURS, OTHER)

_PACKAGES = {
    "pydantic_ai": PYDANTIC_AI,
    "pydantic_graph": PYDANTIC_AI,
    "genai_prices": PYDANTIC_AI,
    "sqlalchemy": SQLALCHEMY,
    "greenlet": SQLALCHEMY,
    "alembic": SQLALCHEMY,
    "aiosqlite": DRIVERS,
    "asyncpg": DRIVERS,
    "sqlite3": DRIVERS,
    "opentelemetry": OTEL,
    "uvicorn": WEB,
    "h11": WEB,
    "httptools": WEB,
    "starlette": WEB,
    "sse_starlette": WEB,
    "agent": OURS,
    "store": OURS,
    "stream": OURS,
    "web": OURS,
    "cli": OURS,
}
_GC = re.compile(r"\bgc_collect|\bcollect_generation|\bgc_collect_main|\(gcmodule\.c")
_POLL = re.compile(r"epoll|\bselect \([^)]*selectors\.py|\bpoll \(|uv__io_poll")
_LOOP = ("asyncio/", "uvloop/", "_asynciomodule.c", "selectors.py")
_WAIT = re.compile(
    r"epoll_wait|select_epoll_poll|select \([^)]*selectors\.py|pthread_cond_(timed)?wait|sem_(timed)?wait|PyThread_acquire_lock|futex|"
    r"Condition\.wait|SimpleQueue\.get|Queue\.get \(queue\.py"
)
_RUNS = re.compile(r"^(Handle\._run|BaseEventLoop\._run_once|task_step|TaskStepMethWrapper) ")
_FRAME = re.compile(r"^(?P<function>.*?) \((?P<where>[^()]*)\)$")


def _where(frame: str) -> str:
    match = _FRAME.match(frame.strip())
    return match.group("where") if match else frame


_OWN = {"agent", "store", "stream", "web", "cli"}
_STDLIB = re.compile(r"/lib/python3\.\d+/")


def _head(where: str) -> str:
    """The top-level package of a frame's file: from a full path (`--full-filenames`) or a short one."""
    if "/site-packages/" in where:
        return where.split("/site-packages/", 1)[1].split("/", 1)[0]
    if where.startswith("/"):
        if _STDLIB.search(where):
            return ""
        # A source tree (the benchmark's snapshot of ours): the package is the folder holding our code.
        parts = where.split("/")[:-1]
        return next((part for part in reversed(parts) if part in _OWN), "")
    return where.split("/", 1)[0] if "/" in where else ""


def _package(frame: str) -> str | None:
    where = _where(frame)
    if "sqlite3" in where or "_sqlite" in where:
        return DRIVERS
    head = _head(where)
    if head == "pydantic_ai" and "instrumentation" in where.rsplit("/", 1)[-1]:
        return OTEL
    return _PACKAGES.get(head)


def is_waiting(frames: list[str]) -> bool:
    """Whether a sample caught its thread blocked (on a lock, a condition, `epoll`): no CPU used.

    py-spy's `--native` samples blocked threads too; their time is not CPU.
    """
    return any(_WAIT.search(frame) for frame in frames[-4:])


_SYSCALL = re.compile(
    r"^(_SelectorSocketTransport\.write|BaseSelectorEventLoop\._sock_connect|BaseSelectorEventLoop\._read_from_self|"
    r"BaseSelectorEventLoop\._write_to_self|_SelectorSocketTransport\._read_ready__\w+) "
)


def in_system_call(frames: list[str]) -> bool:
    """Whether a sample's leaf is a line that makes a system call (a socket write, the self-pipe).

    Its time is the kernel's, in the thread's system time. On a shared core, too, a write that wakes
    a database backend often hands it the core: the thread is then runnable, not running, and
    py-spy still samples it at that line.
    """
    return bool(frames) and bool(_SYSCALL.search(frames[-1]))


def categorize(thread: str, frames: list[str]) -> str:
    """The category of one sample: `thread` is py-spy's thread label, `frames` root first."""
    stack = ";".join(frames)
    if not frames:
        return UNKNOWN
    if _GC.search(stack):
        return GC
    if thread.endswith("bench-gc"):
        return UNKNOWN  # `bench.profile_serve`'s own thread, asleep but sampled as running
    if "MainThread" not in thread:
        if "aiosqlite" in stack or "sqlite3" in stack or "asyncpg" in stack:
            return DRIVERS
        if "opentelemetry" in stack or "Otel" in thread or "agent/tracing.py" in stack:
            return OTEL
        return OTHER
    # Only the frames the loop is running: below them, uvicorn's `Server.run` and our `cli` started it.
    start = max((n + 1 for n, frame in enumerate(frames) if _RUNS.search(frame)), default=0)
    for frame in reversed(frames[start:]):
        found = _package(frame)
        if found is not None:
            return found
    if frames and _POLL.search(frames[-1]):
        return KERNEL
    if start == len(frames) or any(marker in frame for frame in frames[-3:] for marker in _LOOP):
        return LOOP
    if any(_head(_where(frame)) == "anyio" for frame in frames):
        return WEB  # a stack caught without its caller, in anyio: the issue counts anyio with the web stack
    return OTHER


def parse_raw(lines: Iterable[str]) -> list[tuple[str, list[str], int]]:
    """py-spy's raw (collapsed) output: `(thread, frames root first, count)` per line."""
    samples: list[tuple[str, list[str], int]] = []
    for line in lines:
        line = line.rstrip("\n")
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        thread, *frames = stack.split(";")
        samples.append((thread, frames, int(count)))
    return samples


def attribute(samples: Iterable[tuple[str, list[str], int]]) -> Counter[str]:
    """Samples per category."""
    found: Counter[str] = Counter()
    for thread, frames, count in samples:
        found[categorize(thread, frames)] += count
    return found
