"""`python -m cli …` with its heap traced: how `bench.soak --tracemalloc` runs the server.

    BENCH_MEMORY_DIR=/path python -m bench.memory_serve serve --port N --db URL --model demo

Starts `tracemalloc` (`BENCH_MEMORY_FRAMES` frames a traceback, 12 by default; 0 leaves it off,
so the server runs at full speed) before the CLI imports anything, and on every SIGUSR1 writes,
from a thread of its own, after a full garbage collection: `snapshot-N.tracemalloc`
(`tracemalloc.Snapshot.dump`, when tracing), `types-N.json` (live objects the collector tracks,
counted and sized by type) and `taken-N.json` (resident memory, what `tracemalloc` counts, the
blocks Python's allocator has out, glibc's `mallinfo2`: bytes in use and held free, and the
conversation stores' bounded caches: the history cache's charge and size, the records known),
then `done-N` once all are there. The stores are found by wrapping `SqlConversationStore.__init__`
here, before the CLI builds one. `bench.memory_report` compares two of them. Nothing else changes;
the core has no hook for this.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import gc
import importlib
import json
import os
import runpy
import signal
import sys
import tempfile
import threading
import tracemalloc
import weakref
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

from store import SqlConversationStore

__all__ = (
    "FRAMES_ENV",
    "MEMORY_DIR_ENV",
    "caches",
    "count_types",
    "malloc_info",
    "pymalloc_info",
    "register_stores",
    "take",
)

MEMORY_DIR_ENV = "BENCH_MEMORY_DIR"
FRAMES_ENV = "BENCH_MEMORY_FRAMES"


def count_types() -> dict[str, tuple[int, int]]:
    """Objects the collector tracks, by qualified type name: (count, bytes by `sys.getsizeof`)."""
    counts: Counter[type[object]] = Counter()
    sizes: Counter[type[object]] = Counter()
    item: object
    for item in gc.get_objects():
        kind = type(item)
        counts[kind] += 1
        try:
            sizes[kind] += sys.getsizeof(item)
        except Exception:  # a broken __sizeof__ is no reason to lose the census
            continue
    named: dict[str, tuple[int, int]] = {}
    for kind, count in counts.items():
        name = f"{kind.__module__}.{kind.__qualname__}"
        previous = named.get(name, (0, 0))  # two types of one name (a class defined twice)
        named[name] = (previous[0] + count, previous[1] + sizes[kind])
    return named


def _rss_kb() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


class _MallInfo2(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in (
            "arena",
            "ordblks",
            "smblks",
            "hblks",
            "hblkhd",
            "usmblks",
            "fsmblks",
            "uordblks",
            "fordblks",
            "keepcost",
        )
    ]


def malloc_info() -> dict[str, int]:
    """glibc's `mallinfo2()` over every arena: `in_use` and `free` bytes of its heaps, and `mmapped`
    (large blocks mapped on their own); empty where the C library has none (musl, macOS)."""
    library = ctypes.CDLL(ctypes.util.find_library("c"))
    function = getattr(library, "mallinfo2", None)
    if function is None:
        return {}
    function.restype = _MallInfo2
    info = function()
    return {"heap": info.arena, "in_use": info.uordblks, "free": info.fordblks, "mmapped": info.hblkhd}


_PYMALLOC = {
    "# arenas allocated current": "arenas",
    "# bytes in allocated blocks": "in_use",
    "# bytes in available blocks": "free_blocks",
}


def pymalloc_info() -> dict[str, int]:
    """Python's small-object allocator (`sys._debugmallocstats`): its `arenas` (1 MiB each here),
    the bytes of blocks `in_use`, `free_blocks` in used pools and `unused_pools` bytes."""
    saved = os.dup(2)
    with tempfile.TemporaryFile() as captured:
        # It prints to the C library's stderr: borrow descriptor 2 for the moment it takes.
        os.dup2(captured.fileno(), 2)
        try:
            sys._debugmallocstats()  # pyright: ignore[reportPrivateUsage]
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        captured.seek(0)
        text = captured.read().decode(errors="replace")
    info: dict[str, int] = {}
    for line in text.splitlines():
        name, _, value = line.partition("=")
        number = value.strip().replace(",", "")
        if name.strip() in _PYMALLOC and number.isdigit():
            info[_PYMALLOC[name.strip()]] = int(number)
        elif "unused pools" in name and number.isdigit():
            info["unused_pools"] = int(number)
    return info


_stores: weakref.WeakSet[SqlConversationStore] = weakref.WeakSet()


def register_stores() -> Callable[[], None]:
    """Remember every `SqlConversationStore` built from now on, to read its caches' sizes; what undoes it."""
    built = SqlConversationStore.__init__

    @functools.wraps(built)
    def registering(self: SqlConversationStore, *args: Any, **kwargs: Any) -> None:
        built(self, *args, **kwargs)
        _stores.add(self)

    SqlConversationStore.__init__ = registering

    def undo() -> None:
        SqlConversationStore.__init__ = built

    return undo


def caches() -> dict[str, int]:
    """The registered stores' bounded caches: the history cache's charge in bytes and its histories, and
    the conversation records known."""
    stores = list(_stores)
    return {
        "history_charge": sum(store.history_cache.used for store in stores),
        "histories": sum(len(store.history_cache) for store in stores),
        "records": sum(store.known_records() for store in stores),
    }


def take(directory: Path, number: int) -> None:
    """Write snapshot `number`'s files to `directory` (see the module's docstring)."""
    gc.collect()
    if tracemalloc.is_tracing():
        tracemalloc.take_snapshot().dump(str(directory / f"snapshot-{number}.tracemalloc"))
    types = count_types()
    (directory / f"types-{number}.json").write_text(json.dumps(types))
    current, peak = tracemalloc.get_traced_memory()
    taken = {
        "traced": current,
        "peak": peak,
        "overhead": tracemalloc.get_tracemalloc_memory(),
        "rss_kb": _rss_kb(),
        "gc_objects": sum(count for count, _ in types.values()),
        "blocks": sys.getallocatedblocks(),
        "malloc": malloc_info(),
        "pymalloc": pymalloc_info(),
        "caches": caches(),
    }
    (directory / f"taken-{number}.json").write_text(json.dumps(taken))
    (directory / f"done-{number}").touch()


def _serve_requests(directory: Path, wanted: threading.Semaphore) -> None:
    number = 0
    while True:
        wanted.acquire()
        number += 1
        take(directory, number)


def main() -> None:
    directory = os.environ.get(MEMORY_DIR_ENV)
    if directory:
        frames = int(os.environ.get(FRAMES_ENV, "12"))
        if frames:
            # Imported untraced: start-up under tracing took over a minute on a busy machine, and
            # what imports allocate is frozen with the rest of start-up's heap anyway.
            importlib.import_module("cli.main")
            tracemalloc.start(frames)
        register_stores()
        wanted = threading.Semaphore(0)

        def requested(signum: int, frame: FrameType | None) -> None:
            wanted.release()

        signal.signal(signal.SIGUSR1, requested)
        threading.Thread(
            target=_serve_requests, args=(Path(directory), wanted), name="bench-memory", daemon=True
        ).start()
    sys.argv = ["durable-chat", *sys.argv[1:]]
    runpy.run_module("cli", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
