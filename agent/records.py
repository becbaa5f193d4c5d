"""`RunRecords`: structured records tools save for their thread, with the step's next checkpoint."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel
from pydantic_ai import RunContext

from store import NewRecord

__all__ = ("RunRecords", "call_id")


def call_id(ctx: RunContext[Any]) -> str:
    """The id of the tool call `ctx` runs; only a tool's context has one."""
    if ctx.tool_call_id is None:
        raise ValueError("records and the ledger are keyed by tool call: use them from inside a tool")
    return ctx.tool_call_id


class RunRecords:
    """Records a run's tools produce, saved with the step's next checkpoint in one unit of work."""

    def __init__(self) -> None:
        self._pending: dict[str, NewRecord] = {}

    def save(self, ctx: RunContext[Any], record: BaseModel, *, kind: str | None = None) -> None:
        """Save `record` as a record of the thread, once per tool call.

        It is written in the same transaction as the run's next checkpoint, so the record and the
        tool result that mentions it are stored together or not at all; a call that runs again
        (after a crash) replaces what it produced before instead of adding a second record.

        Args:
            ctx: The tool's run context; its `tool_call_id` keys the record.
            record: Any pydantic model; stored as its JSON.
            kind: Names the record's kind (`GET …/records` answers it); the model's class name by default.
        """
        tool_call_id = call_id(ctx)
        self._pending[tool_call_id] = NewRecord(
            tool_call_id=tool_call_id,
            kind=kind or type(record).__name__,
            data=record.model_dump(mode="json"),
        )

    def drain(self) -> list[NewRecord]:
        records, self._pending = list(self._pending.values()), {}
        return records
