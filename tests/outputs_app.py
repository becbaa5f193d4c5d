"""A flight desk with structured output, for the tests of every client: `--app tests.outputs_app:app`.

As pydantic-ai's flight booking example: the agent answers with a union of output types
(`FlightFound`, `NoFlightFound`, `Booked`, or text), an output validator checks every flight
against the timetable, and `book` needs approval, raising `ApprovalRequired` with metadata for the
reviewer. Its offline model reads the conversation:

- "flights to Lisbon": `FlightFound` (TP-101);
- "flights to" anywhere else: a made-up `FlightFound` that the output validator refuses
  (`ModelRetry`), then `NoFlightFound` (an output that was retried);
- "book" and a flight number: `book`, which waits for approval, then `Booked` from its result;
- anything else: a short text.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from typing import Any

from pydantic import BaseModel
from pydantic_ai import Agent, ApprovalRequired, ModelRetry, RunContext
from pydantic_ai.messages import ModelMessage, ModelRequest, RetryPromptPart, ToolReturnPart, UserPromptPart
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, DeltaToolCalls, FunctionModel

from agent import ChatApp

__all__ = ("Booked", "FlightFound", "NoFlightFound", "app")

TIMETABLE = {"TP-101": "Lisbon"}
"""The flights there are: the output validator refuses any other."""

FARE_RULES = {"fare": "non-refundable", "checked_bags": 1, "price": 420.0}
"""What `book` tells the reviewer of every booking (`ApprovalRequired(metadata=...)`)."""


class FlightFound(BaseModel):
    """A flight that matches."""

    flight_number: str
    destination: str
    price: float


class NoFlightFound(BaseModel):
    """No flight matches."""


class Booked(BaseModel):
    """A seat booked."""

    reference: str
    flight_number: str
    passenger: str


async def book(ctx: RunContext[None], flight_number: str, passenger: str) -> dict[str, Any]:
    """Book a seat on `flight_number` for `passenger`; a person approves every booking."""
    if not ctx.tool_call_approved:
        raise ApprovalRequired(metadata=FARE_RULES)
    return {"reference": f"BK-{flight_number}", "flight_number": flight_number, "passenger": passenger}


def _turn(messages: list[ModelMessage]) -> tuple[str, Any] | str:
    """What the model does next: `(tool name, args)` to call, or text to say."""
    request = messages[-1]
    assert isinstance(request, ModelRequest)
    for part in request.parts:
        if isinstance(part, ToolReturnPart) and part.tool_name == "book" and isinstance(part.content, dict):
            return "final_result_Booked", part.content
        if isinstance(part, ToolReturnPart) and part.tool_name == "book":
            return f"The booking was not made: {part.content}"
        if isinstance(part, RetryPromptPart) or (
            isinstance(part, ToolReturnPart) and part.outcome == "retried"
        ):
            return "final_result_NoFlightFound", {}
    said = next(
        (p.content for p in request.parts if isinstance(p, UserPromptPart) and isinstance(p.content, str)), ""
    ).lower()
    flight = re.search(r"\b([a-z]{2}-\d+)\b", said)
    if "book" in said and flight is not None:
        return "book", {"flight_number": flight.group(1).upper(), "passenger": "Ada Lovelace"}
    if "flights to lisbon" in said:
        return "final_result_FlightFound", {
            "flight_number": "TP-101",
            "destination": "Lisbon",
            "price": 420.0,
        }
    if "flights to" in said:
        destination = said.split("flights to")[-1].strip(" ?")
        return "final_result_FlightFound", {
            "flight_number": "XX-1",
            "destination": destination,
            "price": 99.0,
        }
    return "I find and book flights: ask me for flights to a city, or to book one."


async def _stream(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str | DeltaToolCalls]:
    turn = _turn(messages)
    if isinstance(turn, str):
        words = turn.split(" ")
        for index, word in enumerate(words):
            yield word if index == len(words) - 1 else f"{word} "
        return
    tool_name, args = turn
    call_id = f"call_{len(messages)}_{tool_name}"
    yield {0: DeltaToolCall(name=tool_name, tool_call_id=call_id)}
    yield {0: DeltaToolCall(json_args=json.dumps(args))}


agent = Agent(
    FunctionModel(stream_function=_stream, model_name="flight-desk"),
    output_type=[FlightFound, NoFlightFound, Booked, str],
    tools=[book],
    instructions="You find and book flights.",
    name="flights",
)


@agent.output_validator
def on_the_timetable(
    output: FlightFound | NoFlightFound | Booked | str,
) -> FlightFound | NoFlightFound | Booked | str:
    """Refuse a flight that is not on the timetable, as pydantic-ai's flight booking example does."""
    if isinstance(output, FlightFound) and TIMETABLE.get(output.flight_number) != output.destination:
        raise ModelRetry(f"{output.flight_number} to {output.destination} is not on the timetable")
    return output


app = ChatApp(agent=agent, name="Flight desk")
