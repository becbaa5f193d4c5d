"""The output type a run asks pydantic-ai for (`agent/output_types.py`), and the agents refused at start."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel
from pydantic_ai import Agent, ApprovalRequired, DeferredToolRequests, FunctionToolset, RunContext, Tool
from pydantic_ai.models.test import TestModel

from agent import ChatApp, UnservableAgent
from agent.output_types import approval_tools, run_output_type


class Flight(BaseModel):
    number: str


class NoFlight(BaseModel):
    reason: str


def wire(cents: int) -> str:
    """Wire money."""
    return f"wired {cents}"


def _validated(agent: Agent[None, object]) -> Agent[None, object]:
    @agent.output_validator
    def checked(output: object) -> object:  # pyright: ignore[reportUnusedFunction]
        return output

    return agent


def test_a_run_adds_deferred_requests_to_the_agents_output_types() -> None:
    assert run_output_type(Agent(TestModel())) == [str, DeferredToolRequests]
    assert run_output_type(Agent(TestModel(), output_type=[Flight, NoFlight])) == [
        Flight,
        NoFlight,
        DeferredToolRequests,
    ]


def test_an_agent_naming_deferred_requests_or_with_validators_runs_with_its_own_type() -> None:
    assert run_output_type(Agent(TestModel(), output_type=[Flight, DeferredToolRequests])) is None
    assert run_output_type(Agent(TestModel(), output_type=Flight | DeferredToolRequests)) is None
    assert run_output_type(_validated(Agent(TestModel(), output_type=Flight | NoFlight))) is None


def test_the_tools_that_visibly_need_approval_are_found_in_every_toolset() -> None:
    def refund(ctx: RunContext[None], cents: int) -> str:
        """Refund; over 100 asks (not visible before it runs)."""
        if cents > 100 and not ctx.tool_call_approved:
            raise ApprovalRequired
        return "refunded"

    wrapped = FunctionToolset[Any]([wire]).prefixed("bank").approval_required()
    agent = Agent[Any, str](TestModel(), toolsets=[wrapped])
    agent.tool(refund)
    agent.tool_plain(name="wire_now", requires_approval=True)(wire)
    assert approval_tools(agent) == ["wire", "wire_now"]


def test_an_agent_whose_approvals_could_never_pause_is_refused_with_what_to_add() -> None:
    agent = _validated(
        Agent(
            TestModel(),
            output_type=Flight | NoFlight,
            tools=[Tool(wire, requires_approval=True)],
            name="flights",
        )
    )
    with pytest.raises(UnservableAgent) as refused:
        ChatApp(agent=agent)
    assert str(refused.value) == (
        "'flights' has output validators, so pydantic-ai runs it only with its own output type, "
        "Flight | NoFlight, which lacks DeferredToolRequests: its tools that need approval (wire) could "
        "never pause a run. Add DeferredToolRequests to its output types: "
        "Agent(..., output_type=[Flight | NoFlight, DeferredToolRequests])"
    )


def test_an_agent_with_validators_and_no_approval_tools_is_served_as_written() -> None:
    app = ChatApp(agent=_validated(Agent(TestModel(), output_type=Flight | NoFlight, tools=[])))
    assert app.output_type is None
