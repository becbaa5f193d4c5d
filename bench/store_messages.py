"""Deterministic, realistic chat turns for the store benchmark: turn `i` is always the same bytes
(not `tests/messages.py`, so that a test helper's change moves no figure).
"""

from __future__ import annotations

import random
import uuid
from datetime import UTC, datetime, timedelta

from pydantic_ai.messages import (
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.usage import RequestUsage

PROMPT_CHARS = 200
REPLY_CHARS = 600
TOOL_EVERY = 3
"""Every third turn calls a tool: call, ~1 KB return, then the reply."""

_EPOCH = datetime(2025, 1, 1, tzinfo=UTC)
_VOCABULARY = (
    "order refund shipping account invoice package delivery tracking warranty return status customer "
    "premium address payment card update please thanks could would help issue since yesterday today "
    "week month item widget gadget cable replacement damaged missing late early the a an of to and "
    "for with on in my your our it this that is was be have has not"
)
_WORDS = tuple(_VOCABULARY.split())


def _text(rng: random.Random, chars: int) -> str:
    words: list[str] = []
    length = -1
    while length < chars:
        word = rng.choice(_WORDS)
        words.append(word)
        length += len(word) + 1
    return " ".join(words)[:chars]


def _uuid(rng: random.Random) -> str:
    return str(uuid.UUID(int=rng.getrandbits(128), version=4))


def _tool_return(rng: random.Random, order_id: str) -> dict[str, object]:
    items = [
        {
            "sku": f"SKU-{rng.randrange(10_000, 99_999)}",
            "name": _text(rng, 24),
            "quantity": rng.randrange(1, 5),
            "unit_price": round(rng.uniform(5, 200), 2),
        }
        for _ in range(6)
    ]
    return {
        "order_id": order_id,
        "status": rng.choice(["processing", "shipped", "delivered"]),
        "items": items,
        "shipping": {"carrier": "UPS", "tracking": f"1Z{rng.getrandbits(48):012X}", "eta": "2025-01-09"},
        "notes": _text(rng, 300),
    }


def realistic_turn(i: int) -> list[ModelMessage]:
    """The messages turn `i` adds: a prompt, maybe a tool call and its return, then the reply.

    Returns 2 messages, or 4 on every third turn (`i % 3 == 2`).
    """
    rng = random.Random(i)
    at = _EPOCH + timedelta(seconds=30 * i)
    run_id = _uuid(rng)
    messages: list[ModelMessage] = [
        ModelRequest(parts=[UserPromptPart(content=_text(rng, PROMPT_CHARS), timestamp=at)], run_id=run_id)
    ]
    usage = RequestUsage(input_tokens=rng.randrange(300, 3_000), output_tokens=rng.randrange(50, 400))
    if i % TOOL_EVERY == TOOL_EVERY - 1:
        order_id = f"ORD-{rng.randrange(1_000, 9_999)}"
        call_id = f"call_{rng.getrandbits(96):024x}"
        args = {"order_id": order_id, "reason": _text(rng, 100)}
        messages.append(
            ModelResponse(
                parts=[ToolCallPart(tool_name="lookup_order", args=args, tool_call_id=call_id)],
                usage=usage,
                model_name="gpt-4o-2024-08-06",
                timestamp=at + timedelta(seconds=1),
                provider_name="openai",
                finish_reason="tool_call",
                run_id=run_id,
            )
        )
        messages.append(
            ModelRequest(
                parts=[
                    ToolReturnPart(
                        tool_name="lookup_order",
                        content=_tool_return(rng, order_id),
                        tool_call_id=call_id,
                        timestamp=at + timedelta(seconds=2),
                    )
                ],
                run_id=run_id,
            )
        )
    messages.append(
        ModelResponse(
            parts=[TextPart(content=_text(rng, REPLY_CHARS))],
            usage=usage,
            model_name="gpt-4o-2024-08-06",
            timestamp=at + timedelta(seconds=3),
            provider_name="openai",
            provider_response_id=f"chatcmpl-{rng.getrandbits(64):016x}",
            finish_reason="stop",
            run_id=run_id,
        )
    )
    return messages


def history(count: int) -> list[ModelMessage]:
    """The first `count` messages of a conversation made of turns 0, 1, 2, …"""
    messages: list[ModelMessage] = []
    turn = 0
    while len(messages) < count:
        messages.extend(realistic_turn(turn))
        turn += 1
    return messages[:count]


def message_json(message: ModelMessage) -> bytes:
    """One message as compact JSON, exactly as `ModelMessagesTypeAdapter` writes it."""
    return ModelMessagesTypeAdapter.dump_json([message])[1:-1]
