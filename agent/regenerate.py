"""Regenerating a reply: the conversation without its last turn, and the user message that turn answered."""

from __future__ import annotations

from collections.abc import Sequence

from pydantic_ai.conversation import Conversation
from pydantic_ai.messages import ModelMessage, ModelRequest, UserPromptPart

__all__ = ("NothingToRegenerate", "last_prompt", "without_last_turn")


class NothingToRegenerate(Exception):
    """The conversation holds no user message to answer again."""


def last_prompt(messages: Sequence[ModelMessage]) -> tuple[int, str] | None:
    """The index of the last request that carries a user message, and that message's text."""
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if not isinstance(message, ModelRequest):
            continue
        prompts = [part for part in message.parts if isinstance(part, UserPromptPart)]
        if prompts:
            return index, "\n".join(_text(part) for part in prompts)
    return None


def without_last_turn(conversation: Conversation) -> tuple[Conversation, str]:
    """`conversation` up to (not including) its last user message, and that message's text.

    The result is a new conversation at the same revision, not marked as stored: its first save
    compares it with the stored history, finds where it diverges and stores the new turn as a
    branch from there, so the dropped reply stays stored (`ConversationStore.save`).

    Raises:
        NothingToRegenerate: No request of the conversation carries a user message.
    """
    found = last_prompt(conversation.messages)
    if found is None:
        raise NothingToRegenerate(f"conversation {conversation.conversation_id!r} has no user message")
    index, prompt = found
    trimmed = Conversation(
        messages=list(conversation.messages[:index]),
        usage=conversation.usage,
        conversation_id=conversation.conversation_id,
        revision=conversation.revision,
    )
    return trimmed, prompt


def _text(part: UserPromptPart) -> str:
    if isinstance(part.content, str):
        return part.content
    return "".join(item for item in part.content if isinstance(item, str))
