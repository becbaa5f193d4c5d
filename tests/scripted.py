"""Scripted model turns for the guardrail and error tests: a `FunctionModel` that plays a list of steps.

Each model request plays the next step (the last one, `then`, repeats): a text reply, streamed word
by word; tool calls, optionally after some text, in one response; an exception raised before
anything is streamed; or some text streamed, then an exception. Every request's messages are kept,
so a test can assert what the model was (or was not) sent.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass, field, replace

from pydantic_ai import Agent, DeferredToolRequests, Tool
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, DeltaToolCalls, FunctionModel

from agent import Runtime, RuntimeOptions
from agent.demo import INSTRUCTIONS, TOOLS, ShopDeps
from stream import StreamEvent, transcript

__all__ = ("Calls", "FailAfter", "Script", "agent_on", "lines", "runtime_with")


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
        step = self._next(messages)
        match step:
            case str():
                return ModelResponse(parts=[TextPart(step)])
            case Calls(calls=calls, text=text):
                head = [TextPart(text)] if text else []
                return ModelResponse(parts=[*head, *(_call(messages, n, c) for n, c in enumerate(calls))])
            case FailAfter(error=error) | (Exception() as error):
                raise error

    async def _stream(
        self, messages: list[ModelMessage], info: AgentInfo
    ) -> AsyncIterator[str | DeltaToolCalls]:
        step = self._next(messages)
        match step:
            case str():
                for word in _words(step):
                    yield word
            case Calls(calls=calls, text=text):
                for word in _words(text):
                    yield word
                for number, (tool_name, args) in enumerate(calls):
                    call_id = _call_id(messages, number, tool_name)
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


def _call_id(messages: list[ModelMessage], number: int, tool_name: str) -> str:
    # Stable per position in the conversation, as the demo model's are.
    return f"call_{len(messages)}_{number}_{tool_name}"


def _call(messages: list[ModelMessage], number: int, call: tuple[str, dict[str, object]]) -> ToolCallPart:
    tool_name, args = call
    return ToolCallPart(tool_name, json.dumps(args), tool_call_id=_call_id(messages, number, tool_name))


def agent_on(script: Script, *extra_tools: Tool[ShopDeps]) -> Agent[ShopDeps, str | DeferredToolRequests]:
    """The support agent's configuration on the scripted model, with `extra_tools` besides its own."""
    return Agent(
        script.model(),
        deps_type=ShopDeps,
        output_type=[str, DeferredToolRequests],
        instructions=INSTRUCTIONS,
        tools=[*TOOLS, *extra_tools],
        name="support",
    )


def runtime_with(
    runtime: Runtime, script: Script, *extra_tools: Tool[ShopDeps], **changes: object
) -> Runtime:
    """`runtime` serving its app with the scripted agent, the app's other fields changed as given."""
    app = replace(runtime.app, agent=agent_on(script, *extra_tools), **changes)  # pyright: ignore[reportArgumentType]
    return Runtime.of(app, runtime.db, options=RuntimeOptions(), publish=runtime.publish)


def lines(events: list[StreamEvent]) -> list[str]:
    """The transcript with part ids (which embed the run id) shown as `part`."""
    return [re.sub(r"\b[0-9a-f]{8}\.\d+\.\d+\.\d+\b", "part", line) for line in transcript(events)]
