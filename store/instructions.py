"""A request's instructions stored once, in `conversation_instructions`, and named by digest from its entry.

How the bytes look and why a claim is trusted for an hour is in `docs/store.md` ("Instructions").
"""

from __future__ import annotations

import hashlib
import time
from collections import OrderedDict
from collections.abc import Collection, Iterable, Mapping
from datetime import timedelta

import pydantic_core
import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from .schema import ConversationEntryRow, InstructionsRow, metadata, now_utc

__all__ = (
    "CLAIM_FOR",
    "KEEP_UNUSED",
    "Instructions",
    "digest_of",
    "encoded",
    "inflate",
    "named",
    "release_erased",
    "release_unused",
    "tail",
)

_instructions = metadata.tables[InstructionsRow.__tablename__]
_entries = metadata.tables[ConversationEntryRow.__tablename__]

_KEY = b',"instructions_ref":"'
_DIGEST = 32
_TAIL = len(_KEY) + _DIGEST + 2  # the key, the digest, its closing quote and the object's brace
_INFLATED = b',"instructions":'
_KNOWN = 256

CLAIM_FOR = timedelta(hours=1)
"""How long a writer trusts the instructions it claimed to stay stored, before claiming them again."""
KEEP_UNUSED = timedelta(days=1)
"""How long after its last claim a purge keeps an unused text: longer than any claim is trusted."""
KEEP_CLAIMED = 2 * CLAIM_FOR
"""How long after its last claim an erasure keeps a text it leaves unused: a writer may still trust
its claim (for `CLAIM_FOR`, with room for the skew of its clock) and write a message naming it."""


def digest_of(text: bytes) -> str:
    """The id of the instructions `text` (a JSON string): the first 16 bytes of its SHA-256, in hex."""
    return hashlib.sha256(text).hexdigest()[:_DIGEST]


def encoded(instructions: str) -> bytes:
    """`instructions` as a JSON string, as a message's bytes hold them."""
    return pydantic_core.to_json(instructions)


def tail(digest: str) -> bytes:
    """What ends a request's bytes stored without its instructions `digest` names (after its last field)."""
    return _KEY + digest.encode() + b'"}'


def named(raw: bytes) -> str | None:
    """The digest of the instructions the stored message `raw` names, or `None`: it holds them, if any."""
    if raw[-_TAIL : -_DIGEST - 2] != _KEY:
        return None
    return raw[-_DIGEST - 2 : -2].decode("ascii", "replace")


def inflate(raw: bytes, texts: Mapping[str, bytes]) -> bytes:
    """The stored message `raw` with its instructions back in place; as is when it names none or an unknown one."""
    digest = named(raw)
    if digest is None or (text := texts.get(digest)) is None:
        return raw
    return raw[:-_TAIL] + _INFLATED + text + b"}"


class Instructions:
    """The instructions texts a store knows, and the ones it claimed lately to write messages naming them."""

    def __init__(self) -> None:
        self.texts: OrderedDict[str, bytes] = OrderedDict()
        self._claimed: dict[str, float] = {}

    def remember(self, digest: str, text: bytes) -> None:
        self.texts[digest] = text
        self.texts.move_to_end(digest)
        while len(self.texts) > _KNOWN:
            forgotten, _ = self.texts.popitem(last=False)
            self._claimed.pop(forgotten, None)

    async def claim(self, engine: AsyncEngine, texts: Mapping[str, bytes]) -> None:
        """Make sure `texts` (by digest) are stored, and stay so for `CLAIM_FOR`: one statement, unless claimed lately."""
        now = time.monotonic()
        due = {
            digest: text
            for digest, text in texts.items()
            if now - self._claimed.get(digest, -1e18) > CLAIM_FOR.total_seconds()
        }
        if not due:
            return
        used_at = now_utc()
        rows = [{"instructions_id": digest, "text": text, "used_at": used_at} for digest, text in due.items()]
        insert = (postgresql if engine.dialect.name == "postgresql" else sqlite).insert(_instructions)
        upsert = insert.on_conflict_do_update(
            index_elements=[_instructions.c.instructions_id], set_={"used_at": insert.excluded.used_at}
        )
        async with engine.begin() as connection:
            await connection.execute(upsert, rows)
        for digest, text in due.items():
            self.remember(digest, text)
            self._claimed[digest] = now

    async def fetch(self, engine: AsyncEngine, stored: Iterable[bytes]) -> None:
        """Read the texts the `stored` messages name that are not known yet: one statement, if any."""
        missing = {
            digest for raw in stored if (digest := named(raw)) is not None and digest not in self.texts
        }
        if not missing:
            return
        query = sa.select(_instructions.c.instructions_id, _instructions.c.text).where(
            _instructions.c.instructions_id.in_(sorted(missing))
        )
        async with engine.connect() as connection:
            rows = (await connection.execute(query)).all()
        for digest, text in rows:
            self.remember(digest, text)


async def release_erased(connection: AsyncConnection, digests: Collection[str]) -> None:
    """Delete the texts of `digests` (those of erased entries) that no entry names any more and no
    writer claimed for `KEEP_CLAIMED`, in the caller's transaction.

    Race-safe without locks: a writer names a text only under a claim it committed before, within
    `CLAIM_FOR`; such a text is kept. A claim racing this delete either committed first (the row's
    new `used_at` keeps it, on PostgreSQL through the row's recheck) or waits for it and stores the
    text again.
    """
    if not digests:
        return
    named_by_entry = sa.exists().where(_entries.c.instructions_id == _instructions.c.instructions_id)
    await connection.execute(
        _instructions.delete().where(
            _instructions.c.instructions_id.in_(sorted(digests)),
            _instructions.c.used_at < now_utc() - KEEP_CLAIMED,
            ~named_by_entry,
        )
    )


async def release_unused(connection: AsyncConnection) -> int:
    """Delete the texts no entry names and no writer claimed for `KEEP_UNUSED`; how many went."""
    named_by_entry = sa.exists().where(_entries.c.instructions_id == _instructions.c.instructions_id)
    deleted = await connection.execute(
        _instructions.delete().where(_instructions.c.used_at < now_utc() - KEEP_UNUSED, ~named_by_entry)
    )
    return deleted.rowcount
