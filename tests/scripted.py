"""Scripted model turns for the core tests: a `FunctionModel` that plays a list of steps.

Each model request plays the next step (the last one, `then`, repeats): a text reply, streamed word
by word; tool calls, optionally after some text, in one response; an exception raised before
anything is streamed; or some text streamed, then an exception. Every request's messages are kept,
so a test can assert what the model was (or was not) sent. The steps count requests, not turns: the
processes of one test (runtimes opened on one database) that share a script share its position, as
they would share a provider. Tool call ids are `call_<request>_<n>_<tool>`, unique per request as a
provider's are: a turn asked again (regenerated, or after a crash) gets ids of its own.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, DeltaToolCalls, FunctionModel

from stream import StreamEvent, transcript

__all__ = ("Calls", "FailAfter", "Script", "lines")


@dataclass(frozen=True)
class Calls:
    """One response: `text` (if any), then a call per `(tool_name, args)`."""

    calls: list[tuple[str, dict[str, object]]]
    text: str = ""


@dataclass(frozen=True)
class FailAfter:
    """Stream `text`, then raise `error`: a failure after output reached the client."""

    text: str
    error: Exception


Step = str | Calls | Exception | FailAfter


@dataclass
class Script:
    """Plays `steps` in order, then `then` for every later request."""

    steps: list[Step]
    then: Step | None = None
    delay: float = 0.0
    """Seconds the model thinks before each response, as a slow provider would: holds a run between
    two checkpoints (for tests of leases and workers)."""
    requests: list[list[ModelMessage]] = field(default_factory=list[list[ModelMessage]])
    """The messages of every request made, in order."""

    def model(self) -> FunctionModel:
        return FunctionModel(self._request, stream_function=self._stream, model_name="scripted")

    def _next(self, messages: list[ModelMessage]) -> Step:
        self.requests.append(list(messages))
        index = len(self.requests) - 1
        if index < len(self.steps):
            return self.steps[index]
        assert self.then is not None, f"the script has no step for request {index + 1}"
        return self.then

    async def _request(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if self.delay:
            await asyncio.sleep(self.delay)
        step = self._next(messages)
        match step:
            case str():
                return ModelResponse(parts=[TextPart(step)])
            case Calls(calls=calls, text=text):
                head = [TextPart(text)] if text else []
                request = len(self.requests)
                return ModelResponse(parts=[*head, *(_call(request, n, c) for n, c in enumerate(calls))])
            case FailAfter(error=error) | (Exception() as error):
                raise error

    async def _stream(
        self, messages: list[ModelMessage], info: AgentInfo
    ) -> AsyncIterator[str | DeltaToolCalls]:
        if self.delay:
            await asyncio.sleep(self.delay)
        step = self._next(messages)
        match step:
            case str():
                for word in _words(step):
                    yield word
            case Calls(calls=calls, text=text):
                for word in _words(text):
                    yield word
                for number, (tool_name, args) in enumerate(calls):
                    call_id = _call_id(len(self.requests), number, tool_name)
                    yield {number: DeltaToolCall(name=tool_name, tool_call_id=call_id)}
                    yield {number: DeltaToolCall(json_args=json.dumps(args))}
            case FailAfter(text=text, error=error):
                for word in _words(text):
                    yield word
                raise error
            case Exception():
                raise step


def _words(text: str) -> list[str]:
    words = text.split(" ")
    return [f"{word} " for word in words[:-1]] + [words[-1]] if text else []


def _call_id(request: int, number: int, tool_name: str) -> str:
    return f"call_{request}_{number}_{tool_name}"


def _call(request: int, number: int, call: tuple[str, dict[str, object]]) -> ToolCallPart:
    tool_name, args = call
    return ToolCallPart(tool_name, json.dumps(args), tool_call_id=_call_id(request, number, tool_name))


def lines(events: list[StreamEvent]) -> list[str]:
    """The transcript with part ids (which embed the run id) shown as `part`."""
    return [re.sub(r"\b[0-9a-f]{8}\.\d+\.\d+\.\d+\b", "part", line) for line in transcript(events)]
