"""Helpers of the `ConversationStore` conformance suite in `test_conversations.py`.

Short messages that read well in a transcript, what a backend physically keeps, and the random
operations the property test runs on two backends side by side.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

import sqlalchemy as sa
from hypothesis import strategies as st
from pydantic_ai.conversation import Conversation, ConversationTypeAdapter
from pydantic_ai.conversation_store import (
    ConversationConflict,
    ConversationEntry,
    ConversationStore,
    InMemoryConversationStore,
)
from pydantic_ai.exceptions import UserError
from pydantic_ai.messages import (
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    TextPart,
    UserPromptPart,
)

from store import SqlConversationStore
from store.schema import ConversationEntryRow

from .messages import realistic_turn

__all__ = (
    "Operation",
    "StoreFactory",
    "apply",
    "dump",
    "observe",
    "operations",
    "reply",
    "saved",
    "stored_entry_ids",
    "transcript",
    "turns",
    "user",
)

StoreFactory = Callable[[], Awaitable[ConversationStore]]
"""Opens another store on the test's database: a new instance, with its own connections, each call."""

_AT = datetime(2025, 3, 14, 12, 0, tzinfo=UTC)


def user(text: str) -> ModelRequest:
    """A user's turn holding only `text`."""
    return ModelRequest(parts=[UserPromptPart(text, timestamp=_AT)], timestamp=_AT)


def reply(text: str) -> ModelResponse:
    """A model's reply holding only `text`."""
    return ModelResponse(parts=[TextPart(text)], model_name="test", timestamp=_AT)


def transcript(messages: Sequence[ModelMessage] | Sequence[ConversationEntry]) -> list[str]:
    """The text of each message (or entry's message), to compare histories at a glance."""
    texts: list[str] = []
    for item in messages:
        message = item.message if isinstance(item, ConversationEntry) else item
        match message.parts[0]:
            case UserPromptPart(content=str(text)) | TextPart(content=text):
                texts.append(text)
            case part:
                texts.append(f"<{part.part_kind}>")
    return texts


def turns(count: int) -> list[ModelMessage]:
    return [message for i in range(count) for message in realistic_turn(i)]


def dump(messages: list[ModelMessage]) -> bytes:
    return ModelMessagesTypeAdapter.dump_json(messages)


async def saved(
    store: ConversationStore, conversation_id: str, *texts: str, scope: str | None = None
) -> Conversation:
    """A conversation of alternating user and model `texts`, saved to `store`."""
    conversation = Conversation(
        conversation_id=conversation_id,
        messages=[user(text) if i % 2 == 0 else reply(text) for i, text in enumerate(texts)],
    )
    await store.save(conversation, scope=scope)
    return conversation


async def stored_entry_ids(store: ConversationStore) -> set[str]:
    """The ids of every entry the backend physically keeps, whichever conversation they belong to."""
    if isinstance(store, InMemoryConversationStore):
        return set(store._entries)  # pyright: ignore[reportPrivateUsage]
    assert isinstance(store, SqlConversationStore)
    async with store.engine.connect() as connection:
        return set((await connection.execute(sa.select(ConversationEntryRow.entry_id))).scalars())


# -- The property test's operations -----------------------------------------------------------------

CONVERSATION_IDS = ("c0", "c1", "c2")


@dataclass(frozen=True)
class Save:
    """Load the conversation (or start it), append `count` messages, and save it."""

    conversation: int
    count: int
    through_json: bool


@dataclass(frozen=True)
class Edit:
    """Replace one message of the loaded conversation with an edited copy and save: a rewritten history."""

    conversation: int
    index: int


@dataclass(frozen=True)
class Branch:
    """Branch the conversation at `at` modulo its length + 1."""

    conversation: int
    at: int


@dataclass(frozen=True)
class BranchBack:
    """Branch the conversation back to one of the branches it left."""

    conversation: int
    which: int


@dataclass(frozen=True)
class Fork:
    """Fork the conversation into `target`, keeping all of it or `at` modulo its length + 1 messages."""

    conversation: int
    target: int
    at: int | None


@dataclass(frozen=True)
class Delete:
    conversation: int


@dataclass(frozen=True)
class Reopen:
    """Close the store and open a new one on the same database, as a restarted process would."""


Operation = Save | Edit | Branch | BranchBack | Fork | Delete | Reopen

_conversation = st.integers(0, len(CONVERSATION_IDS) - 1)
operations: st.SearchStrategy[list[Operation]] = st.lists(
    st.one_of(
        st.builds(Save, _conversation, st.integers(1, 3), st.booleans()),
        st.builds(Edit, _conversation, st.integers(0, 20)),
        st.builds(Branch, _conversation, st.integers(0, 20)),
        st.builds(BranchBack, _conversation, st.integers(0, 5)),
        st.builds(Fork, _conversation, _conversation, st.none() | st.integers(0, 20)),
        st.builds(Delete, _conversation),
        st.just(Reopen()),
    ),
    min_size=1,
    max_size=12,
)


async def apply(store: ConversationStore, operation: Operation, step: int) -> str:
    """Run `operation` (the `step`th) on `store`; what came of it, as a word both backends must agree on."""
    try:
        await _apply(store, operation, step)
    except ConversationConflict:
        return "conflict"
    except UserError:
        return "user error"
    return "ok"


async def _apply(store: ConversationStore, operation: Operation, step: int) -> None:
    match operation:
        case Save(conversation, count, through_json):
            conversation_id = CONVERSATION_IDS[conversation]
            loaded = await store.load(conversation_id) or Conversation(conversation_id=conversation_id)
            if through_json:
                loaded = ConversationTypeAdapter.validate_json(ConversationTypeAdapter.dump_json(loaded))
            loaded.messages += [
                user(f"{conversation_id} step {step}.{n}")
                if n % 2 == 0
                else reply(f"{conversation_id} step {step}.{n}")
                for n in range(count)
            ]
            await store.save(loaded)
        case Edit(conversation, index):
            loaded = await store.load(CONVERSATION_IDS[conversation])
            if loaded is not None and loaded.messages:
                loaded.messages[index % len(loaded.messages)] = user(f"edited at step {step}")
                await store.save(loaded)
        case Branch(conversation, at):
            loaded = await store.load(CONVERSATION_IDS[conversation])
            if loaded is not None:
                at = at % (len(loaded.messages) + 1)
                await store.branch(loaded.conversation_id, at=at, expected_revision=loaded.revision)
        case BranchBack(conversation, which):
            record = await store.read_record(CONVERSATION_IDS[conversation])
            if record is not None and record.branches:
                tip = record.branches[which % len(record.branches)]
                await store.branch(record.conversation_id, from_entry=tip, expected_revision=record.revision)
        case Fork(conversation, target, at):
            loaded = await store.load(CONVERSATION_IDS[conversation])
            if loaded is not None:
                keep = None if at is None else at % (len(loaded.messages) + 1)
                await store.fork(
                    loaded.conversation_id, at=keep, new_conversation_id=CONVERSATION_IDS[target]
                )
        case Delete(conversation):
            await store.delete(CONVERSATION_IDS[conversation])
        case Reopen():
            pass  # The caller swaps the store.


@dataclass(frozen=True)
class Observed:
    """What a caller can see of one conversation, without the ids each backend mints itself."""

    messages: list[str]
    branches: list[list[str]]
    forked_from: str | None


async def observe(store: ConversationStore) -> tuple[list[str], dict[str, Observed | None], int]:
    """The listing order, every conversation's history and the branches it left, and how many entries are kept."""
    observed: dict[str, Observed | None] = {}
    for conversation_id in CONVERSATION_IDS:
        record = await store.read_record(conversation_id)
        loaded = await store.load(conversation_id)
        if record is None or loaded is None:
            observed[conversation_id] = None
            continue
        observed[conversation_id] = Observed(
            messages=transcript(loaded.messages),
            branches=[transcript(await store.read_history(tip)) for tip in record.branches],
            forked_from=record.forked_from,
        )
    listed = [record.conversation_id for record in await store.list_conversations()]
    return listed, observed, len(await stored_entry_ids(store))
