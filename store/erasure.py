"""Erasing a conversation: its record, and the entries no other conversation of its family reaches.

Entries are shared along a family (a fork starts from its parent's entries), so deleting a
conversation releases only the entries on its histories (its head and its branches' tips) that
no other record of the family still reaches (see `store.conversations`' module docstring). The
instructions those entries named go with them when nothing else names them and no writer may
still be about to (`store.instructions.release_erased`).
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from . import codec
from .instructions import release_erased
from .schema import ConversationEntryRow, ConversationRecordRow, metadata

__all__ = ("erase_conversation",)

_entries = metadata.tables[ConversationEntryRow.__tablename__]
_records = metadata.tables[ConversationRecordRow.__tablename__]


async def erase_conversation(
    connection: AsyncConnection, conversation_id: str, *, revision: str | None = None
) -> bool:
    """Delete a conversation's record and the entries no other conversation reaches, in the caller's transaction.

    With `revision`, only if the record still has it. Returns whether a record was deleted. The
    entries a fork still shares stay (see the module's docstring).
    """
    query = _records.delete().where(_records.c.conversation_id == conversation_id)
    if revision is not None:
        query = query.where(_records.c.revision == revision)
    deleted = (
        await connection.execute(
            query.returning(_records.c.head_id, _records.c.branches, _records.c.family_id)
        )
    ).one_or_none()
    if deleted is None:
        return False
    head_id, branches, family_id = deleted
    tips = _tips(head_id, branches, conversation_id)
    if tips:
        await _release_entries(connection, tips, family_id)
    return True


def _tips(head_id: str | None, raw_branches: bytes, conversation_id: str) -> list[str]:
    branches = codec.decode_branches(raw_branches, conversation_id=conversation_id)
    return [tip for tip in dict.fromkeys([*branches, head_id]) if tip is not None]


async def _release_entries(connection: AsyncConnection, tips: list[str], family_id: str) -> None:
    """Delete the entries on the histories ending at `tips` that no other record of the family reaches."""
    others = (
        await connection.execute(
            sa.select(_records.c.conversation_id, _records.c.head_id, _records.c.branches).where(
                _records.c.family_id == family_id
            )
        )
    ).all()
    kept_tips = [tip for row in others for tip in _tips(row.head_id, row.branches, row.conversation_id)]
    doomed = _reachable("doomed", "tips")
    released = sa.select(doomed.c.entry_id)
    parameters: dict[str, list[str]] = {"tips": tips}
    if kept_tips:
        kept = _reachable("kept", "kept_tips")
        released = released.except_(sa.select(kept.c.entry_id))
        parameters["kept_tips"] = kept_tips
    erased = await connection.execute(
        _entries.delete().where(_entries.c.entry_id.in_(released)).returning(_entries.c.instructions_id),
        parameters,
    )
    await release_erased(connection, {digest for (digest,) in erased if digest is not None})


def _reachable(name: str, tips: str) -> sa.CTE:
    """Every entry on the histories ending at the entries bound to the expanding parameter `tips`."""
    start = sa.select(_entries.c.entry_id, _entries.c.parent_id).where(
        _entries.c.entry_id.in_(sa.bindparam(tips, expanding=True))
    )
    walk = start.cte(name, recursive=True)
    return walk.union(
        sa.select(_entries.c.entry_id, _entries.c.parent_id).join(
            walk, _entries.c.entry_id == walk.c.parent_id
        )
    )
