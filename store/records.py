"""Structured records: outputs tools save for their thread, one per tool call."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from .engine import reader, translate_errors
from .schema import RecordRow, metadata

__all__ = ("NewRecord", "Record", "Records")

_records = metadata.tables[RecordRow.__tablename__]


@dataclass(frozen=True)
class NewRecord:
    """A record a tool produced, to be saved with the step's checkpoint."""

    tool_call_id: str
    kind: str
    data: dict[str, object]


@dataclass(frozen=True)
class Record:
    thread_id: str
    tool_call_id: str
    run_id: str
    kind: str
    data: dict[str, object]
    created_at: datetime


class Records:
    """The `records` table."""

    def __init__(self, engine: AsyncEngine) -> None:
        self._reader = reader(engine)

    async def list(self, thread_id: str) -> list[Record]:
        query = (
            sa.select(_records)
            .where(_records.c.thread_id == thread_id)
            .order_by(_records.c.created_at, _records.c.tool_call_id)
        )
        with translate_errors(f"listing the records of thread {thread_id!r}"):
            async with self._reader.connect() as connection:
                rows = (await connection.execute(query)).mappings().all()
        return [
            Record(
                thread_id=row["thread_id"],
                tool_call_id=row["tool_call_id"],
                run_id=row["run_id"],
                kind=row["kind"],
                data=json.loads(row["data"]),
                created_at=row["created_at"],
            )
            for row in rows
        ]
