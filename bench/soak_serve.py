"""`python -m cli …` that takes a census of its memory when asked: how `bench.soak` runs the server.

On SIGUSR1, after a full collection, it writes `types-N.json` (objects by type), `taken-N.json`
(allocators and the stores' bounded caches, found by wrapping `SqlConversationStore.__init__`), then
`done-N`, in `$BENCH_CENSUS_DIR`.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import gc
import json
import os
import runpy
import signal
import sys
import tempfile
import threading
import weakref
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

from store import SqlConversationStore

__all__ = (
    "CENSUS_DIR_ENV",
    "caches",
    "count_types",
    "malloc_info",
    "pymalloc_info",
    "register_stores",
    "take",
)

CENSUS_DIR_ENV = "BENCH_CENSUS_DIR"
_PYMALLOC = {
    "# arenas allocated current": "arenas",
    "# bytes in allocated blocks": "in_use",
    "# bytes in available blocks": "free_blocks",
}


def count_types() -> dict[str, tuple[int, int]]:
    """Objects the collector tracks, by qualified type name: (count, bytes by `sys.getsizeof`)."""
    found: dict[str, tuple[int, int]] = {}
    item: object
    for item in gc.get_objects():
        kind = type(item)
        name = f"{kind.__module__}.{kind.__qualname__}"
        try:
            size = sys.getsizeof(item)
        except Exception:  # a broken __sizeof__ is no reason to lose the census
            size = 0
        count, total = found.get(name, (0, 0))
        found[name] = (count + 1, total + size)
    return found


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
    """glibc's `mallinfo2()`: `heap`, `in_use` and `free` bytes, and `mmapped` (large blocks mapped on their
    own); empty where the C library has none (musl, macOS)."""
    function = getattr(ctypes.CDLL(ctypes.util.find_library("c")), "mallinfo2", None)
    if function is None:
        return {}
    function.restype = _MallInfo2
    info = function()
    return {"heap": info.arena, "in_use": info.uordblks, "free": info.fordblks, "mmapped": info.hblkhd}


def pymalloc_info() -> dict[str, int]:
    """Python's small-object allocator (`sys._debugmallocstats`): its `arenas` (1 MiB each here), the bytes
    of blocks `in_use`, `free_blocks` in used pools and `unused_pools` bytes."""
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
    """Remember every `SqlConversationStore` built from now on, to read its caches; what undoes it."""
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


def _rss_kb() -> int:
    lines = Path("/proc/self/status").read_text().splitlines()
    return next((int(line.split()[1]) for line in lines if line.startswith("VmRSS:")), 0)


def take(directory: Path, number: int) -> None:
    """Write census `number`'s files to `directory` (see the module's docstring)."""
    gc.collect()
    types = count_types()
    (directory / f"types-{number}.json").write_text(json.dumps(types))
    taken = {
        "rss_kb": _rss_kb(),
        "gc_objects": sum(count for count, _ in types.values()),
        "blocks": sys.getallocatedblocks(),
        "malloc": malloc_info(),
        "pymalloc": pymalloc_info(),
        "caches": caches(),
    }
    (directory / f"taken-{number}.json").write_text(json.dumps(taken))
    (directory / f"done-{number}").touch()


def main() -> None:
    if directory := os.environ.get(CENSUS_DIR_ENV):
        register_stores()
        wanted = threading.Semaphore(0)

        def requested(signum: int, frame: FrameType | None) -> None:
            wanted.release()

        def serve_requests() -> None:
            number = 0
            while wanted.acquire():
                number += 1
                take(Path(directory), number)

        signal.signal(signal.SIGUSR1, requested)
        threading.Thread(target=serve_requests, name="bench-census", daemon=True).start()
    sys.argv = ["durable-chat", *sys.argv[1:]]
    runpy.run_module("cli", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
