"""An offline model for the travel desk, so the example runs without an API key.

It reads the latest user message: a destination (Lisbon, Berlin, London) searches flights, "book" and
a flight number books it, "voucher" and an amount issues a voucher, "itinerary" saves one; after tool
results it answers with a sentence that uses them. Text streams word by word, as a provider's does.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator

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

__all__ = ("travel_model",)

_CITIES = ("Lisbon", "Berlin", "London")
_FLIGHT = re.compile(r"\b([A-Z]{2}-\d{3})\b")
_AMOUNT = re.compile(r"\$?(\d+(?:\.\d+)?)")
_FOR = re.compile(r"\bfor ([A-Z][a-z]+(?: [A-Z][a-z]+)*)")


def travel_model() -> FunctionModel:
    """The travel desk's offline model, named `travel-demo`."""
    return FunctionModel(_request, stream_function=_stream, model_name="travel-demo")


async def _request(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    answer = _answer(messages)
    if isinstance(answer, str):
        return ModelResponse(parts=[TextPart(answer)])
    return ModelResponse(
        parts=[ToolCallPart(name, json.dumps(args), tool_call_id=call_id) for call_id, name, args in answer]
    )


async def _stream(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str | DeltaToolCalls]:
    answer = _answer(messages)
    if isinstance(answer, str):
        words = answer.split(" ")
        for index, word in enumerate(words):
            yield word if index == len(words) - 1 else word + " "
        return
    for number, (call_id, name, args) in enumerate(answer):
        yield {number: DeltaToolCall(name=name, json_args=json.dumps(args), tool_call_id=call_id)}


def _answer(messages: list[ModelMessage]) -> str | list[tuple[str, str, dict[str, object]]]:
    last = messages[-1]
    results = (
        [part for part in last.parts if isinstance(part, ToolReturnPart)]
        if isinstance(last, ModelRequest)
        else []
    )
    if results:
        return " ".join(_describe(part) for part in results)
    prompt = _latest_prompt(messages)
    made = sum(isinstance(p, ToolCallPart) for m in messages if isinstance(m, ModelResponse) for p in m.parts)

    def call(name: str, args: dict[str, object]) -> list[tuple[str, str, dict[str, object]]]:
        return [(f"call_{made}_{name}", name, args)]

    flight = _FLIGHT.search(prompt)
    lowered = prompt.lower()
    if "book" in lowered and flight:
        passenger = _FOR.search(prompt)
        return call(
            "book_flight",
            {"flight_id": flight.group(1), "passenger": passenger.group(1) if passenger else "the traveller"},
        )
    if "voucher" in lowered and (amount := _AMOUNT.search(prompt)):
        return call("issue_voucher", {"amount": float(amount.group(1)), "reason": prompt})
    if "itinerary" in lowered:
        return call(
            "save_itinerary", {"flights": _FLIGHT.findall(" ".join(_prompts(messages))), "notes": prompt}
        )
    for city in _CITIES:
        if city.lower() in lowered:
            return call("search_flights", {"destination": city})
    return (
        "Hello! I'm the travel desk. I can search flights to Lisbon, Berlin or London, book one "
        "(a person approves every booking), issue vouchers and save your itinerary."
    )


def _describe(part: ToolReturnPart) -> str:
    content = part.content
    if part.outcome == "denied":
        return f"The {part.tool_name.replace('_', ' ')} was not done: {content}"
    if part.outcome == "failed" or not isinstance(content, dict):
        return f"Sorry, {part.tool_name.replace('_', ' ')} did not work: {content}"
    match part.tool_name:
        case "search_flights":
            flights = content.get("flights") or []
            listed = "; ".join(
                f"{f['flight_id']} at {f['departs'][11:]} for ${f['price']:.0f}" for f in flights
            )
            return f"Flights found: {listed}." if listed else "No flights found."
        case "book_flight":
            return (
                f"Booked {content['flight_id']} for {content['passenger']}: reference {content['booking_ref']} "
                f"(account {content['tenant']}, ${content['price']:.2f})."
            )
        case "issue_voucher":
            return f"Issued voucher {content['code']} for ${content['amount']:.2f}."
        case _:
            return "Saved your itinerary."


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
