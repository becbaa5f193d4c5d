"""Edited arguments: checked against the schema the model saw for the tool, strictly.

A run records the JSON schema of every tool's arguments as pydantic-ai prepares them for each
model request (`ToolSchemas`, a capability), whatever toolset the tool comes from (function tools,
MCP servers, prepared or renamed toolsets); a pause keeps each pending call's schema on its
approval row. An approver's `override_args` must fit that schema as JSON does: a boolean or a
numeric string is not a number, as no JSON Schema validator would take it for one. Checking the
stored schema, not the live agent, also works on any worker and after a restart.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError, ValidationError
from pydantic_ai import RunContext
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.tools import ToolDefinition

__all__ = ("InvalidArguments", "ToolSchemas", "validate_args")

JsonObject = dict[str, object]


class InvalidArguments(ValueError):
    """Edited arguments do not fit the tool's schema."""

    def __init__(self, tool_name: str, errors: list[dict[str, object]]) -> None:
        self.tool_name = tool_name
        self.errors = errors
        details = "; ".join(f"{_location(error['loc'])}: {error['msg']}" for error in errors)
        super().__init__(f"the arguments do not fit {tool_name!r}: {details}")


@dataclass
class ToolSchemas(AbstractCapability[Any]):
    """Remembers the argument schema of each tool as the model was last offered it."""

    schemas: dict[str, JsonObject] = field(default_factory=dict[str, JsonObject])

    @classmethod
    def get_serialization_name(cls) -> str | None:
        return None  # configured in code, not from an agent spec

    async def prepare_tools(
        self, ctx: RunContext[Any], tool_defs: list[ToolDefinition]
    ) -> list[ToolDefinition]:
        for tool_def in tool_defs:
            self.schemas[tool_def.name] = dict(tool_def.parameters_json_schema)
        return tool_defs


def validate_args(tool_name: str, args: object, schema: Mapping[str, object] | None) -> JsonObject:
    """`args` as a JSON object, if it fits `schema` (the tool's, as the model saw it).

    A call held before schemas were kept has none: then any JSON object is taken, and the tool's own
    validation runs when the call does.

    Raises:
        InvalidArguments: They don't fit; the error lists each problem with its field.
    """
    if not isinstance(args, dict):
        raise InvalidArguments(tool_name, [{"loc": [], "msg": "arguments must be a JSON object"}])
    given: dict[object, object] = args  # pyright: ignore[reportUnknownVariableType]  # a JSON object
    checked: JsonObject = {str(key): value for key, value in given.items()}
    if schema is None:
        return checked
    try:
        validator = Draft202012Validator(dict(schema), format_checker=Draft202012Validator.FORMAT_CHECKER)
        instance: Any = checked  # jsonschema types its instances as JSON; a JSON object's values are
        problems = sorted(
            validator.iter_errors(instance),  # pyright: ignore[reportUnknownMemberType]  # loosely typed stubs
            key=lambda error: list(error.absolute_path),
        )
    except SchemaError as error:  # a toolset's hand-written schema may be broken; say so, don't crash
        raise InvalidArguments(
            tool_name, [{"loc": [], "msg": f"the tool's schema is invalid: {error.message}"}]
        ) from error
    if problems:
        raise InvalidArguments(tool_name, [item for problem in problems for item in _errors(problem)])
    return checked


def _errors(problem: ValidationError) -> list[dict[str, object]]:
    path: list[object] = list(problem.absolute_path)
    # jsonschema types these loosely; the checks below narrow what each validator hands over.
    instance: Any = problem.instance
    expected: Any = problem.validator_value
    schema: Any = problem.schema
    if problem.validator == "required" and isinstance(instance, dict) and isinstance(expected, list):
        present: dict[object, object] = instance  # pyright: ignore[reportUnknownVariableType]
        names: list[object] = expected  # pyright: ignore[reportUnknownVariableType]
        return [
            {"loc": [*path, name], "msg": "a required field is missing"}
            for name in names
            if name not in present
        ]
    if (
        problem.validator == "additionalProperties"
        and isinstance(instance, dict)
        and isinstance(schema, dict)
    ):
        given: dict[object, object] = instance  # pyright: ignore[reportUnknownVariableType]
        properties: object = schema.get("properties", {})  # pyright: ignore[reportUnknownMemberType, reportUnknownVariableType]
        known: set[object] = set(properties) if isinstance(properties, dict) else set()  # pyright: ignore[reportUnknownArgumentType]
        return [{"loc": [*path, name], "msg": "no such field"} for name in given if name not in known]
    return [{"loc": path, "msg": problem.message}]


def _location(loc: object) -> str:
    parts: list[object] = list(loc) if isinstance(loc, (list, tuple)) else [loc]  # pyright: ignore[reportUnknownArgumentType]
    return ".".join(str(part) for part in parts) or "(arguments)"
