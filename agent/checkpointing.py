"""When a run checkpoints: after every node, but for two that can wait for the run's next one."""

from __future__ import annotations

from collections.abc import Collection, Sequence

from pydantic_ai import CallToolsNode
from pydantic_ai.messages import ModelMessage, ModelResponse, ToolCallPart, ToolReturnPart

__all__ = ("answers_last_response", "calls_only")


def answers_last_response(node: object) -> bool:
    """Whether `node` only ends the run on a final response: its checkpoint can wait for the end's."""
    if not isinstance(node, CallToolsNode):
        return False
    response: ModelResponse = node.model_response  # pyright: ignore[reportUnknownMemberType]
    return not response.tool_calls


def calls_only(unsaved: Sequence[ModelMessage], tools: Collection[str]) -> bool:
    """Whether `unsaved` holds one response, calling tools, and every call and result in it is of `tools`.

    With `tools` the app's read-only ones (`ChatApp.read_only_tools`), such a checkpoint can wait
    for the next: after a crash, the model call that asked for them and the tools run again,
    changing nothing. The result of any other tool (a resumed refund's) is stored at once, as
    before. One response at most: a run calling lookups in a loop still checkpoints every other
    step, so a crash repeats one model call, never a run's worth.
    """
    responses = [message for message in unsaved if isinstance(message, ModelResponse)]
    if len(responses) != 1 or not responses[0].tool_calls:
        return False
    return all(
        part.tool_name in tools
        for message in unsaved
        for part in message.parts
        if isinstance(part, ToolCallPart | ToolReturnPart)
    )
