"""The JSONL trace file, capped: past a size it is rotated, and a few earlier files are kept.

`traces.jsonl` is renamed `traces.jsonl.1` (the `.1` before it `.2`, and so on) when the next batch
would take it past `max_bytes`; the file past `keep` is deleted. So the trace files hold at most
about `(keep + 1) * max_bytes`. Each batch is one append to a file opened for it, so a rotation by
another process sharing the file is picked up at the next batch; two processes rotating at once can
leave one file smaller than the cap, never lose a line still kept.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

__all__ = ("DEFAULT_TRACE_FILES", "DEFAULT_TRACE_MAX_BYTES", "append_capped", "trace_files")

DEFAULT_TRACE_MAX_BYTES = 100 * 1024 * 1024
"""The size past which the trace file is rotated (`DURABLE_CHAT_TRACE_MAX_MB`, 100)."""

DEFAULT_TRACE_FILES = 4
"""How many rotated trace files are kept besides the current one (`DURABLE_CHAT_TRACE_FILES`, 4)."""


def _rotated(path: Path, n: int) -> Path:
    return path.with_name(f"{path.name}.{n}")


def append_capped(path: Path, text: str, *, max_bytes: int | None, keep: int) -> None:
    """Append `text` to `path`, rotating it first when `text` would take it past `max_bytes` (`None`: never).

    Raises:
        OSError: The file cannot be written (or rotated).
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    data = text.encode()
    if max_bytes is not None:
        try:
            size = path.stat().st_size
        except FileNotFoundError:
            size = 0
        if size > 0 and size + len(data) > max_bytes:
            _rotate(path, keep)
    # One write per batch in append mode: lines of concurrent processes do not interleave.
    with path.open("ab") as file:
        file.write(data)


def _rotate(path: Path, keep: int) -> None:
    if keep <= 0:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
        return
    with contextlib.suppress(FileNotFoundError):
        _rotated(path, keep).unlink()
    for n in range(keep - 1, 0, -1):
        with contextlib.suppress(FileNotFoundError):
            os.replace(_rotated(path, n), _rotated(path, n + 1))
    with contextlib.suppress(FileNotFoundError):
        os.replace(path, _rotated(path, 1))


def trace_files(path: Path) -> list[Path]:
    """The trace file and its rotated predecessors that exist, oldest first (the current one last)."""
    older: list[Path] = []
    n = 1
    while _rotated(path, n).exists():
        older.append(_rotated(path, n))
        n += 1
    return [*reversed(older), *([path] if path.exists() else [])]
