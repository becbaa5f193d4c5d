"""Encoding of pydantic-ai values to the bytes stored in the database, and back.

A history is decoded in one call: the stored message bytes are joined into one JSON array and
validated by `ModelMessagesTypeAdapter`, which is several times faster than one call per row.
Only when that fails is each row decoded alone, to name the corrupt one.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

import pydantic
from pydantic_ai.messages import ModelMessage, ModelMessagesTypeAdapter
from pydantic_ai.tools import DeferredToolRequests
from pydantic_ai.usage import RunUsage

from .errors import CorruptData

__all__ = (
    "decode_branches",
    "decode_deferred",
    "decode_messages",
    "decode_usage",
    "encode_branches",
    "encode_deferred",
    "encode_message",
    "encode_usage",
)

# The same bytes handling as `ModelMessagesTypeAdapter`, for one message at a time.
T = TypeVar("T")

_config = pydantic.ConfigDict(ser_json_bytes="base64", val_json_bytes="base64")
_message_adapter: pydantic.TypeAdapter[ModelMessage] = pydantic.TypeAdapter(ModelMessage, config=_config)
_usage_adapter = pydantic.TypeAdapter(RunUsage)
_deferred_adapter = pydantic.TypeAdapter(DeferredToolRequests)
_branches_adapter = pydantic.TypeAdapter(list[str])


def encode_message(message: ModelMessage) -> bytes:
    return _message_adapter.dump_json(message)


def decode_messages(rows: Sequence[tuple[str, bytes]], *, where: str) -> list[ModelMessage]:
    """Decode `(entry_id, message_bytes)` rows, in order; `where` says where they come from, for errors.

    Raises:
        CorruptData: A row does not hold a valid message; the error names its entry.
    """
    if not rows:
        return []
    try:
        return ModelMessagesTypeAdapter.validate_json(b"[" + b",".join(row[1] for row in rows) + b"]")
    except (pydantic.ValidationError, TypeError, ValueError):
        pass
    messages: list[ModelMessage] = []
    for entry_id, raw in rows:
        try:
            messages.append(_message_adapter.validate_json(raw))
        except (pydantic.ValidationError, TypeError, ValueError) as error:
            raise CorruptData(
                f"entry {entry_id!r} {where} does not hold a valid message: {_first_line(error)}"
            ) from error
    # Each row decodes alone but the array did not: only invalid UTF-8 spanning rows could do that.
    return messages


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


def _decode(adapter: pydantic.TypeAdapter[T], raw: bytes, what: str) -> T:
    try:
        return adapter.validate_json(raw)
    except (pydantic.ValidationError, TypeError, ValueError) as error:
        raise CorruptData(f"the stored {what} is not valid: {_first_line(error)}") from error


def _first_line(error: Exception) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__
