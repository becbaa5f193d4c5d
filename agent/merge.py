"""What a checkpoint stores: the stored conversation, then what the run added since, never a rewrite."""

from __future__ import annotations

from collections.abc import Sequence

from pydantic_ai.messages import ModelMessage

__all__ = ("unsaved",)


def unsaved(saved: Sequence[ModelMessage], new: Sequence[ModelMessage]) -> list[ModelMessage]:
    """The messages of `new` that follow the last one of `saved`: what a checkpoint appends.

    `saved` holds what the run's checkpoints stored so far; `new` is what pydantic-ai counts as the
    run's new messages (`AgentRun.new_messages()`). They usually extend `saved`, but a history
    processor (`ProcessHistory`) may have dropped or copied some of them in the run's history since;
    the conversation keeps what was stored (clients showed it) and gets what came after. A message
    is found by identity, else by equality (a copy).
    """
    if not saved:
        return list(new)
    for match in (_is, _equal):
        for index in range(len(new) - 1, -1, -1):
            if any(match(new[index], old) for old in saved):
                return list(new[index + 1 :])
    return list(new)


def _is(message: ModelMessage, old: ModelMessage) -> bool:
    return message is old


def _equal(message: ModelMessage, old: ModelMessage) -> bool:
    return type(message) is type(old) and (message.parts is old.parts or message == old)
