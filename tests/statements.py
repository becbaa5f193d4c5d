"""Recording the statements a store sends, through SQLAlchemy or on the driver (the compiled hot path)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from store.compiled import observing
from store.engine import reader


@contextmanager
def sent_statements(engine: AsyncEngine, keep: Callable[[str], str] = str) -> Iterator[list[str]]:
    """`keep(sql)` of every statement sent on `engine` or its reader inside the block, in order."""
    sent: list[str] = []

    def count(*args: object) -> None:
        sent.append(keep(str(args[2])))

    engines = [engine.sync_engine, reader(engine).sync_engine]
    for each in engines:
        sa.event.listen(each, "before_cursor_execute", count)
    try:
        # The hot path's statements bypass SQLAlchemy's execution: they are observed apart.
        with observing(lambda sql: count(None, None, sql)):
            yield sent
    finally:
        for each in engines:
            sa.event.remove(each, "before_cursor_execute", count)
