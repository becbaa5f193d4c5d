"""An offline model for the venue's desk, one script per agent, so the example runs without an API key.

Each agent reads the latest user message (or, for the payments agent, the task it was given). A
message about another desk's matter is handed to that desk (`transfer_to_<name>`); its own matter
calls its tool; after tool results it answers with a sentence that uses them. Text streams word by
word, as a provider's does. Call ids are derived from the conversation, so a request asked again
gets the same answer, and are unique within a thread, as a provider's are.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import AsyncIterator, Callable

from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, DeltaToolCalls, FunctionModel

__all__ = ("ROUTES", "venue_model")

Call = tuple[str, dict[str, object]]
Answer = str | list[Call]

ROUTES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("rooms", ("hold", "room", "ballroom", "loft")),
    ("dates", ("date", "free", "available", "when")),
    ("offers", ("offer", "package", "quote", "price")),
    ("intake", ("wedding", "conference", "party", "guests", "event")),
    ("desk", ("desk", "start over")),
)
"""Which desk a message is about: the first whose words it holds."""

_DATE = re.compile(r"\b(\d{4}-\d{2}-\d{2})\b")
_ROOM = re.compile(r"\b(Garden Room|Ballroom|Loft)\b", re.IGNORECASE)
_NUMBER = re.compile(r"\b(\d+)\b")
_KINDS = ("wedding", "conference", "party")
_DEPOSIT = re.compile(r"deposit of \$(\d+(?:\.\d+)?) for (\S+)")


def venue_model(agent: str) -> FunctionModel:
    """The scripted model of the agent named `agent` (`desk`, `intake`, `dates`, `rooms`, `offers`, `payments`)."""
    own = _OWN[agent]

    def answer(
        messages: list[ModelMessage], info: AgentInfo
    ) -> list[tuple[str, str, dict[str, object]]] | str:
        last = messages[-1]
        results = (
            [p for p in last.parts if isinstance(p, ToolReturnPart)] if isinstance(last, ModelRequest) else []
        )
        if results:
            return " ".join(_describe(part) for part in results)
        prompt = _latest_prompt(messages)
        tools = {tool.name for tool in info.function_tools}
        routed = _route(prompt)
        reply: Answer
        if routed is not None and routed != agent and f"transfer_to_{routed}" in tools:
            reply = [(f"transfer_to_{routed}", {})]
        else:
            reply = own(prompt)
        if isinstance(reply, str):
            return reply
        made = sum(isinstance(m, ModelResponse) for m in messages)
        seed = hashlib.sha256(repr(_prompts(messages)).encode()).hexdigest()[:8]
        return [(f"{agent}-{made}-{seed}-{i}", name, args) for i, (name, args) in enumerate(reply)]

    async def request(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        got = answer(messages, info)
        if isinstance(got, str):
            return ModelResponse(parts=[TextPart(got)])
        return ModelResponse(parts=[ToolCallPart(n, json.dumps(a), tool_call_id=c) for c, n, a in got])

    async def stream(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str | DeltaToolCalls]:
        got = answer(messages, info)
        if isinstance(got, str):
            words = got.split(" ")
            for index, word in enumerate(words):
                yield word if index == len(words) - 1 else word + " "
            return
        for number, (call_id, name, args) in enumerate(got):
            yield {number: DeltaToolCall(name=name, json_args=json.dumps(args), tool_call_id=call_id)}

    return FunctionModel(request, stream_function=stream, model_name=f"venue-{agent}")


def _route(prompt: str) -> str | None:
    lowered = prompt.lower()
    return next((desk for desk, words in ROUTES if any(word in lowered for word in words)), None)


def _desk(prompt: str) -> Answer:
    return (
        "Welcome to the Harbour Hall events desk. Tell me about your event, ask whether a date is "
        "free, hold a room (Garden Room, Ballroom or Loft) or ask for our packages."
    )


def _intake(prompt: str) -> Answer:
    kind = next((k for k in _KINDS if k in prompt.lower()), "event")
    number = _NUMBER.search(prompt)
    return [("record_event", {"kind": kind, "guests": int(number.group(1)) if number else 50})]


def _dates(prompt: str) -> Answer:
    date = _DATE.search(prompt)
    if date is None:
        return "Which date? Please write it as 2027-06-12."
    return [("check_date", {"date": date.group(1)})]


def _rooms(prompt: str) -> Answer:
    room, date = _ROOM.search(prompt), _DATE.search(prompt)
    if room is None or date is None:
        return "Which room (Garden Room, Ballroom or Loft), and on which date?"
    return [("hold_room", {"room": room.group(1).title(), "date": date.group(1)})]


def _offers(prompt: str) -> Answer:
    number = _NUMBER.search(prompt)
    return [("quote", {"guests": int(number.group(1)) if number else 50})]


def _payments(prompt: str) -> Answer:
    deposit = _DEPOSIT.search(prompt)
    if deposit is None:
        return "I take deposits for held rooms only."
    return [("charge_deposit", {"amount": float(deposit.group(1)), "reference": deposit.group(2)})]


_OWN: dict[str, Callable[[str], Answer]] = {
    "desk": _desk,
    "intake": _intake,
    "dates": _dates,
    "rooms": _rooms,
    "offers": _offers,
    "payments": _payments,
}


def _describe(part: ToolReturnPart) -> str:
    content = part.content
    if part.tool_name.startswith("transfer_to_"):
        return f"I'm passing you to our {part.tool_name.removeprefix('transfer_to_')} desk: it answers your next message."
    if part.outcome == "denied":
        return f"The {part.tool_name.replace('_', ' ')} was not done: {content}"
    if part.outcome == "failed" or not isinstance(content, dict):
        return f"{content}" if isinstance(content, str) else f"Sorry, {part.tool_name} did not work."
    match part.tool_name:
        case "record_event":
            return f"Noted: a {content['kind']} for {content['guests']} guests. Ask me about dates next."
        case "check_date":
            free = ", ".join(content["free"]) or "no room"  # pyright: ignore[reportUnknownArgumentType]
            return f"On {content['date']} we have free: {free}."
        case "hold_room":
            return f"The {content['room']} is held for {content['date']}. {content['payment']}"
        case "quote":
            return "; ".join(f"{p['name']}: ${p['price']:.0f}" for p in content["packages"]) + "."  # pyright: ignore[reportUnknownVariableType, reportUnknownMemberType]
        case "charge_deposit":
            return f"Deposit {content['receipt']} of ${content['amount']:.2f} taken."
        case _:
            return "Done."


def _prompts(messages: list[ModelMessage]) -> list[str]:
    return [
        part.content
        for message in messages
        if isinstance(message, ModelRequest)
        for part in message.parts
        if isinstance(part, UserPromptPart) and isinstance(part.content, str)
    ]


def _latest_prompt(messages: list[ModelMessage]) -> str:
    prompts = _prompts(messages)
    return prompts[-1] if prompts else ""
