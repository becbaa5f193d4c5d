"""Keeping the stored message objects in a run's new history, so a checkpoint appends only what is new."""

from __future__ import annotations

from collections.abc import Sequence

from pydantic_ai.messages import ModelMessage

__all__ = ("merge_stored",)


def merge_stored(stored: Sequence[ModelMessage], current: Sequence[ModelMessage]) -> list[ModelMessage]:
    """`current`, with the stored objects kept wherever it holds an equal message.

    pydantic-ai re-creates some messages it carries over (a resumed request, a response it answers
    deferred calls of) with the same content; keeping the stored objects lets the store append only
    what is new instead of comparing the whole history.
    """
    merged: list[ModelMessage] = []
    for index, message in enumerate(current):
        old = stored[index] if index < len(stored) else None
        if old is not None and (message is old or _same(message, old)):
            merged.append(old)
        else:
            merged.append(message)
    return merged


def _same(message: ModelMessage, old: ModelMessage) -> bool:
    if type(message) is not type(old):
        return False
    return message.parts is old.parts or message == old
