"""A user's app as written, for the benchmarks: one agent, one lookup tool, default settings.

    durable-chat serve --app bench.harness.plain_app:app

No `read_only_tools`, no tuning: what someone following `docs/your-agent.md` would deploy. Its model
(a `FunctionModel`, offline) calls `lookup_order` for the order the message names, then answers in
about 60 words, streamed in 12 deltas. `bench.harness.adapter --app plain` serves the same agent
with nothing stored.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator

from pydantic_ai import Agent
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, DeltaToolCalls, FunctionModel

from agent import ChatApp

ANSWER_DELTAS = 12
ORDERS: dict[str, dict[str, object]] = {
    "ORD-5678": {"order_id": "ORD-5678", "item": "Widget Pro", "quantity": 2, "status": "shipped"},
    "ORD-9012": {"order_id": "ORD-9012", "item": "Gadget Plus", "quantity": 1, "status": "processing"},
}
_ORDER_ID = re.compile(r"ORD-\d+")
_FILLER = (
    "It left our warehouse on schedule and the carrier confirmed the pickup this morning, so delivery "
    "should follow within three to five working days depending on your region and local holidays. "
    "You will get an e-mail with the tracking link as soon as the parcel reaches the sorting centre, "
    "and you can reply here anytime if anything looks wrong with it."
)


def lookup_order(order_id: str) -> dict[str, object]:
    """Look up an order by its id (ORD-1234)."""
    return ORDERS.get(order_id.upper(), {"order_id": order_id, "status": "unknown"})


def _answer(order_id: str) -> list[str]:
    """About 60 words about the order (as `lookup_order` found it), in `ANSWER_DELTAS` deltas."""
    order = lookup_order(order_id)
    head = f"Your order {order.get('order_id', '?')} ({order.get('item', 'an item')}) is {order.get('status', 'unknown')}. "
    return deltas(head + _FILLER)


def deltas(text: str, count: int = ANSWER_DELTAS) -> list[str]:
    """`text` in `count` deltas of as many words each (the last shorter)."""
    words = text.split(" ")
    size = -(-len(words) // count)
    return [" ".join(words[n : n + size]) + " " for n in range(0, len(words), size)]


def answered(messages: list[ModelMessage]) -> bool:
    """Whether the last message returns a tool's result: the model's turn to answer."""
    last = messages[-1] if messages else None
    return isinstance(last, ModelRequest) and any(isinstance(part, ToolReturnPart) for part in last.parts)


def _order_id(messages: list[ModelMessage]) -> str:
    for message in reversed(messages):
        for part in message.parts if isinstance(message, ModelRequest) else ():
            if part.part_kind == "user-prompt" and isinstance(part.content, str):
                found = _ORDER_ID.search(part.content)
                return found.group(0) if found else "ORD-5678"
    return "ORD-5678"


def _call_id(messages: list[ModelMessage]) -> str:
    # Unique within the thread, as a provider's are: durable-chat keys calls by id.
    return f"call_{sum(isinstance(m, ModelResponse) for m in messages)}_{len(messages)}"


async def _request(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    if not answered(messages):
        args = json.dumps({"order_id": _order_id(messages)})
        return ModelResponse(parts=[ToolCallPart("lookup_order", args, tool_call_id=_call_id(messages))])
    return ModelResponse(parts=[TextPart("".join(_answer(_order_id(messages))))])


async def _stream(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str | DeltaToolCalls]:
    if not answered(messages):
        args = json.dumps({"order_id": _order_id(messages)})
        yield {0: DeltaToolCall(name="lookup_order", json_args=args, tool_call_id=_call_id(messages))}
        return
    for delta in _answer(_order_id(messages)):
        yield delta


def build_agent() -> Agent[None, str]:
    """The app's agent: a support assistant with one lookup tool."""
    model = FunctionModel(_request, stream_function=_stream, model_name="plain")
    return Agent(model, instructions="You help customers with their orders.", tools=[lookup_order])


app = ChatApp(agent=build_agent())
