"""`python -m cli …` with its garbage collections timed: how `bench.profile` runs the server.

py-spy without `--native` cannot see the collector, so `gc.callbacks` time each collection and a
thread writes the totals to `$BENCH_GC_FILE` as JSON four times a second.
"""

from __future__ import annotations

import gc
import json
import os
import runpy
import sys
import threading
import time
from pathlib import Path

__all__ = ("GC_FILE_ENV",)

GC_FILE_ENV = "BENCH_GC_FILE"
_spent: dict[str, float] = {"seconds": 0.0, "collections": 0}
_started = [0.0]


def _timed(phase: str, info: dict[str, int]) -> None:
    if phase == "start":
        _started[0] = time.thread_time()
    else:
        spent = time.thread_time() - _started[0]
        _spent["seconds"] += spent
        _spent["collections"] += 1
        generation = info.get("generation", 0)
        _spent[f"gen{generation}_seconds"] = _spent.get(f"gen{generation}_seconds", 0.0) + spent
        _spent[f"gen{generation}_collections"] = _spent.get(f"gen{generation}_collections", 0) + 1


def _write(path: Path) -> None:
    partial = path.with_suffix(".partial")
    while True:
        partial.write_text(json.dumps(_spent))
        partial.replace(path)
        time.sleep(0.25)


def main() -> None:
    path = os.environ.get(GC_FILE_ENV)
    if path:
        gc.callbacks.append(_timed)
        threading.Thread(target=_write, args=(Path(path),), name="bench-gc", daemon=True).start()
    sys.argv = ["durable-chat", *sys.argv[1:]]
    runpy.run_module("cli", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
