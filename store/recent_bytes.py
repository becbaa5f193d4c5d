"""The bytes of files this process stored lately, handed to the first read of each instead of a read back."""

from __future__ import annotations

from collections import OrderedDict
from typing import IO

__all__ = ("FILE_LIMIT", "TOTAL_LIMIT", "RecentBytes")

FILE_LIMIT = 2 * 1024 * 1024
"""The largest file kept: a bigger one is read back from the store (its upload's memory stays flat)."""
TOTAL_LIMIT = 16 * 1024 * 1024
"""The most bytes kept together; the oldest go first."""


class RecentBytes:
    """Files' bytes by blob key, each kept until its first read, its deletion or `TOTAL_LIMIT` pushes it out."""

    def __init__(self) -> None:
        self._kept: OrderedDict[str, bytes] = OrderedDict()
        self._total = 0

    def keep(self, key: str, source: IO[bytes], size: int) -> None:
        """Keep the `size` bytes of `source` (read again from its start) under `key`, unless too big."""
        if size > FILE_LIMIT:
            return
        source.seek(0)
        data = source.read(size)
        if len(data) != size:
            return
        self.forget([key])
        self._kept[key] = data
        self._total += size
        while self._total > TOTAL_LIMIT:
            _, dropped = self._kept.popitem(last=False)
            self._total -= len(dropped)

    def take(self, key: str, size: int) -> bytes | None:
        """The bytes kept under `key`, no longer kept; `None` when not kept (or not `size` long)."""
        data = self._kept.pop(key, None)
        if data is None:
            return None
        self._total -= len(data)
        return data if len(data) == size else None

    def forget(self, keys: list[str]) -> None:
        for key in keys:
            data = self._kept.pop(key, None)
            if data is not None:
                self._total -= len(data)
