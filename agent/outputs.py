"""What clients are shown of a run's output and of a held call's metadata: JSON, and a type's name.

Both are stored (in the event log, on the approval row) and read back for as long as the thread
lives, so they are made JSON-safe here, where they leave the user's Python: models, dataclasses and
dates become their JSON form, NaN and the infinities become `null`, keys become strings, anything
else its `str()`.
"""

from __future__ import annotations

import types
import typing
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic_ai import DeferredToolRequests, NativeOutput, PromptedOutput, TextOutput, ToolOutput
from pydantic_ai.messages import OutputToolResultEvent, ToolResultEvent
from pydantic_core import to_jsonable_python

from stream import RunFinished

from .ledger import OUTCOME_UNKNOWN
from .withdrawals import EventTags

__all__ = ("FINAL_RESULT_PROCESSED", "OutputCalls", "RunOutput", "call_metadata", "json_safe", "run_output")

FINAL_RESULT_PROCESSED = "Final result processed."
"""What pydantic-ai answers the output tool call that gave the run's output (and no other call)."""

_DEFAULT_OUTPUT_TOOL = "final_result"


def json_safe(value: object) -> object:
    """`value` as JSON values only: what JSON cannot hold is made into what it can (see the module)."""
    return to_jsonable_python(value, fallback=str, inf_nan_mode="null", bytes_mode="base64")


def call_metadata(metadata: Mapping[str, Any] | None) -> dict[str, object] | None:
    """A held call's metadata as its reviewer sees it, JSON-safe; `None` when there is none, or when it
    is durable-chat's own (the ledger's mark of a call whose outcome is unknown, which the approval's
    `outcome` says)."""
    if not metadata or OUTCOME_UNKNOWN in metadata:
        return None
    safe = json_safe(dict(metadata))
    assert isinstance(safe, dict)
    return typing.cast(dict[str, object], safe)  # JSON object keys are strings


@dataclass(frozen=True)
class RunOutput:
    """A run's output as `run_finished` carries it."""

    value: object
    """The text, or the structured output as JSON."""
    type_name: str | None
    """The structured output's type (`None` for text)."""


def run_output(output: object, spec: object, tool_name: str | None) -> RunOutput:
    """`output` for clients, its type named from the value or, for a dict (a `TypedDict`), from `spec`.

    Args:
        output: What the run gave.
        spec: The agent's `output_type`.
        tool_name: The output tool that gave it, if one did (it names a union's member).
    """
    if isinstance(output, str):
        return RunOutput(output, None)
    value, name = json_safe(output), type(output).__name__
    if isinstance(output, dict):
        name = _dict_type(spec, tool_name) or name
    return RunOutput(value, name)


class OutputCalls:
    """Which output tool call gave a run's output, told from the tool results pydantic-ai streams."""

    def __init__(self) -> None:
        self._gave: tuple[int, str, str] | None = None
        """`(response, tool_call_id, tool_name)` of the last output call that gave an output."""

    def settled(self, event: ToolResultEvent, response: int) -> None:
        """Note a tool result of the run's `response`-th model response."""
        part = event.part
        if isinstance(event, OutputToolResultEvent) and part.content == FINAL_RESULT_PROCESSED:
            self._gave = (response, part.tool_call_id, part.tool_name)

    def finished(self, tags: EventTags, output: object, spec: object, response: int) -> RunFinished:
        """The `run_finished` of a run that completed with `output` after `response` model responses.

        An output call answers the run's last response: one of an earlier response was taken back
        (pydantic-ai asked again, a function tool's retry winning over it).
        """
        gave = self._gave
        call_id, tool_name = gave[1:] if gave is not None and gave[0] == response else (None, None)
        shown = run_output(output, spec, tool_name)
        return RunFinished(
            **tags,
            status="completed",
            output=shown.value,
            output_type=shown.type_name,
            output_tool_call_id=call_id,
        )


def _dict_type(spec: object, tool_name: str | None) -> str | None:
    """The `TypedDict` (or `StructuredDict`) of `spec` a dict output is, when it can be told."""
    members = list(_dict_members(spec, None))
    if len(members) == 1:
        return members[0][0]
    if tool_name is None:
        return None
    for name, explicit in members:
        if tool_name in (explicit, f"{_DEFAULT_OUTPUT_TOOL}_{name}"):
            return name
    return None


def _dict_members(spec: object, tool_name: str | None) -> Iterator[tuple[str, str | None]]:
    """`(type name, its output tool's given name)` of every dict-like type `spec` may give."""
    match spec:
        case ToolOutput():
            wrapped = _field(spec, "output")  # pyright: ignore[reportUnknownArgumentType]  # any output
            yield from _dict_members(wrapped, spec.name)
        case NativeOutput() | PromptedOutput():
            wrapped = _field(spec, "outputs")  # pyright: ignore[reportUnknownArgumentType]  # any outputs
            yield from _dict_members(wrapped, tool_name)
        case TextOutput():
            return
        case str() | bytes():
            return
        case Sequence():
            for item in typing.cast(Sequence[object], spec):
                yield from _dict_members(item, None)
        case types.UnionType():
            for item in typing.get_args(spec):
                yield from _dict_members(item, None)
        case type() if spec is not DeferredToolRequests and (
            typing.is_typeddict(spec) or issubclass(spec, dict)
        ):
            if spec is not dict:
                yield spec.__name__, tool_name
        case _ if typing.get_origin(spec) is typing.Union:
            for item in typing.get_args(spec):
                yield from _dict_members(item, None)
        case _:
            return


def _field(marker: object, name: str) -> object:
    """The output spec a marker (`ToolOutput`, `NativeOutput`...) wraps, as a plain object to walk."""
    return getattr(marker, name)
