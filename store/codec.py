"""Encoding of pydantic-ai values to the bytes stored in the database, and back.

A history is decoded in one call: the stored message bytes are joined into one JSON array and
validated by `ModelMessagesTypeAdapter`, which is several times faster than one call per row.
Only when that fails is each row decoded alone, to name the corrupt one. A conversation's record
goes to and from its row here too (`record_values`, `record_from_row`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import pydantic
from pydantic_ai.conversation_store import ConversationRecord
from pydantic_ai.messages import ModelMessage, ModelMessagesTypeAdapter, ModelRequest
from pydantic_ai.tools import DeferredToolRequests
from pydantic_ai.usage import RunUsage

from . import instructions as stored_instructions
from .errors import CorruptData

if TYPE_CHECKING:
    from sqlalchemy.engine import RowMapping

__all__ = (
    "decode_branches",
    "decode_deferred",
    "decode_messages",
    "decode_usage",
    "encode_branches",
    "encode_deferred",
    "encode_entry",
    "encode_message",
    "encode_usage",
    "record_from_row",
    "record_values",
)

# The same bytes handling as `ModelMessagesTypeAdapter`, for one message at a time.
T = TypeVar("T")

_config = pydantic.ConfigDict(ser_json_bytes="base64", val_json_bytes="base64")
_message_adapter: pydantic.TypeAdapter[ModelMessage] = pydantic.TypeAdapter(ModelMessage, config=_config)
_usage_adapter = pydantic.TypeAdapter(RunUsage)
_deferred_adapter = pydantic.TypeAdapter(DeferredToolRequests)
_branches_adapter = pydantic.TypeAdapter(list[str])


_NO_INSTRUCTIONS: Mapping[str, bytes] = {}


def encode_message(message: ModelMessage) -> bytes:
    return _message_adapter.dump_json(message)


def encode_entry(message: ModelMessage) -> tuple[bytes, str | None, bytes | None]:
    """The bytes to store for `message`, and the digest and text of its instructions, stored apart.

    A request with instructions is stored without them, its bytes naming them by digest
    (`store.instructions`); any other message is stored whole, with no digest.
    """
    if not isinstance(message, ModelRequest) or message.instructions is None:
        return _message_adapter.dump_json(message), None, None
    text = stored_instructions.encoded(message.instructions)
    digest = stored_instructions.digest_of(text)
    body = _message_adapter.dump_json(message, exclude={"instructions"})
    return body[:-1] + stored_instructions.tail(digest), digest, text


def decode_messages(
    rows: Sequence[tuple[str, bytes]], *, where: str, instructions: Mapping[str, bytes] = _NO_INSTRUCTIONS
) -> list[ModelMessage]:
    """Decode `(entry_id, message_bytes)` rows, in order; `where` says where they come from, for errors.

    A message naming its instructions by digest gets their text from `instructions`.

    Raises:
        CorruptData: A row does not hold a valid message, or names instructions not in
            `instructions`; the error names its entry.
    """
    if not rows:
        return []
    raws = [_inflated(entry_id, raw, instructions, where) for entry_id, raw in rows]
    try:
        return ModelMessagesTypeAdapter.validate_json(b"[" + b",".join(raws) + b"]")
    except (pydantic.ValidationError, TypeError, ValueError):
        pass
    messages: list[ModelMessage] = []
    for (entry_id, _), raw in zip(rows, raws, strict=True):
        try:
            messages.append(_message_adapter.validate_json(raw))
        except (pydantic.ValidationError, TypeError, ValueError) as error:
            raise CorruptData(
                f"entry {entry_id!r} {where} does not hold a valid message: {_first_line(error)}"
            ) from error
    # Each row decodes alone but the array did not: only invalid UTF-8 spanning rows could do that.
    return messages


def _inflated(entry_id: str, raw: bytes, instructions: Mapping[str, bytes], where: str) -> bytes:
    """`raw` with the instructions it names back in place.

    Raises:
        CorruptData: It names instructions not in `instructions`.
    """
    digest = stored_instructions.named(raw)
    if digest is None:
        return raw
    if digest not in instructions:
        raise CorruptData(f"entry {entry_id!r} {where} names instructions {digest!r} that are not stored")
    return stored_instructions.inflate(raw, instructions)


def encode_usage(usage: RunUsage) -> bytes:
    return _usage_adapter.dump_json(usage)


def decode_usage(raw: bytes, *, conversation_id: str) -> RunUsage:
    return _decode(_usage_adapter, raw, f"usage of conversation {conversation_id!r}")


def encode_deferred(requests: DeferredToolRequests | None) -> bytes | None:
    return None if requests is None else _deferred_adapter.dump_json(requests)


def decode_deferred(raw: bytes | None, *, conversation_id: str) -> DeferredToolRequests | None:
    if raw is None:
        return None
    return _decode(_deferred_adapter, raw, f"deferred tool requests of conversation {conversation_id!r}")


def encode_branches(branches: Sequence[str]) -> bytes:
    return _branches_adapter.dump_json(list(branches))


def decode_branches(raw: bytes, *, conversation_id: str) -> list[str]:
    return _decode(_branches_adapter, raw, f"branches of conversation {conversation_id!r}")


def record_values(record: ConversationRecord) -> dict[str, object]:
    """The columns of `record`'s row, its pydantic-ai values encoded."""
    return {
        "conversation_id": record.conversation_id,
        "scope": record.scope,
        "head_id": record.head_id,
        "revision": record.revision,
        "updated_at": record.updated_at,
        "usage": encode_usage(record.usage),
        "deferred_tool_requests": encode_deferred(record.deferred_tool_requests),
        "forked_from": record.forked_from,
        "forked_at": record.forked_at,
        "branches": encode_branches(record.branches),
        "format_version": record.format_version,
    }


def record_from_row(mapping: Mapping[str, Any] | RowMapping) -> ConversationRecord:
    """The record a row holds.

    Raises:
        CorruptData: The row is in a format this version cannot read, or a value does not decode.
    """
    conversation_id: str = mapping["conversation_id"]
    if mapping["format_version"] != 1:
        raise CorruptData(
            f"conversation {conversation_id!r} is stored in format {mapping['format_version']!r}, "
            "which this version of durable-chat cannot read"
        )
    return ConversationRecord(
        conversation_id=conversation_id,
        head_id=mapping["head_id"],
        usage=decode_usage(mapping["usage"], conversation_id=conversation_id),
        deferred_tool_requests=decode_deferred(
            mapping["deferred_tool_requests"], conversation_id=conversation_id
        ),
        scope=mapping["scope"],
        forked_from=mapping["forked_from"],
        forked_at=mapping["forked_at"],
        branches=decode_branches(mapping["branches"], conversation_id=conversation_id),
        revision=mapping["revision"],
        updated_at=mapping["updated_at"],
    )


def _decode(adapter: pydantic.TypeAdapter[T], raw: bytes, what: str) -> T:
    try:
        return adapter.validate_json(raw)
    except (pydantic.ValidationError, TypeError, ValueError) as error:
        raise CorruptData(f"the stored {what} is not valid: {_first_line(error)}") from error


def _first_line(error: Exception) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__
