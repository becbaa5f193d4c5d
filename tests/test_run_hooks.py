"""`RunHooks` gives pydantic-ai the runtime's five capabilities as one: it must forward every hook they use.

Their behaviour is tested through runs elsewhere (retries and tool failures in `test_errors`,
hidden blocked turns in `test_guardrails`, the recorded schemas in `test_approvals`, the results
checkpoint `sending` calls in `test_conformance`); this pins that a hook one of them gains
is not silently dropped by the bundle.
"""

from __future__ import annotations

from pydantic_ai.capabilities import AbstractCapability

from agent import ModelRetries, PauseAtDeferredCalls, RunHooks, ToolFailures, ToolSchemas
from agent.guardrails import HideBlockedTurns


def _hooks(cls: type) -> set[str]:
    """The hooks of `AbstractCapability` that `cls` (or a class between them) overrides."""
    base = vars(AbstractCapability)
    overridden: set[str] = set()
    for klass in cls.__mro__:
        if klass is AbstractCapability or not issubclass(klass, AbstractCapability):
            continue
        overridden |= {
            name
            for name, value in vars(klass).items()
            if name in base and callable(value) and not name.startswith("_")
        }
    return overridden - {"get_serialization_name"}


def test_the_bundle_overrides_exactly_the_hooks_of_its_parts() -> None:
    parts = set[str]().union(
        *(
            _hooks(cls)
            for cls in (HideBlockedTurns, ModelRetries, ToolFailures, ToolSchemas, PauseAtDeferredCalls)
        )
    )
    assert parts == {
        "before_model_request",
        "get_ordering",
        "handle_deferred_tool_calls",
        "on_model_request_error",
        "on_run_error",
        "on_tool_execute_error",
        "prepare_tools",
        "wrap_tool_execute",
    }
    # And `prepare_model_request`, for the step's `sending`.
    assert _hooks(RunHooks) == parts | {"prepare_model_request"}
