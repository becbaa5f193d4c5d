"""Hand-offs: `transfer_to_<name>` tools that make another agent the thread's speaker.

A transfer is stored on the thread (`threads.agent`) as the tool runs, with an `agent_changed`
event; the agent that transferred finishes its turn, and the thread's next turns are answered by
the new one, with the conversation so far.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from pydantic_ai import FunctionToolset, Tool
from pydantic_ai.agent import AbstractAgent
from pydantic_ai.messages import ModelResponse

from store import Database, Run

__all__ = ("SAID_BY", "said_by", "speaker", "transfer_tool_name", "transfer_tools")

SAID_BY = "durable_chat_agent"
"""The key of a stored reply's `provider_details` that names the agent that gave it."""


def said_by(response: ModelResponse, agent: str) -> None:
    """Mark `response` as `agent`'s, in place (a checkpoint finds the messages it stores by identity)."""
    response.provider_details = {**(response.provider_details or {}), SAID_BY: agent}


def transfer_tool_name(agent_name: str) -> str:
    """The name of the tool that hands the conversation to `agent_name`."""
    return f"transfer_to_{agent_name}"


def transfer_tools(
    speakers: list[AbstractAgent[Any, Any]], current: str, transfer: Callable[[str], Awaitable[None]]
) -> FunctionToolset[Any]:
    """The tools of the agent `current`: one per other agent of `speakers`, calling `transfer(name)`."""

    def tool(name: str, description: str | None) -> Tool[Any]:
        async def hand_off() -> str:
            await transfer(name)
            return f"The conversation is now with {name}; it answers the user's next message."

        about = f"Hand the conversation to the {name} agent" + (f" ({description})" if description else "")
        return Tool(hand_off, name=transfer_tool_name(name), description=about + ".", takes_ctx=False)

    return FunctionToolset(
        [
            tool(agent.name, getattr(agent, "description", None))
            for agent in speakers
            if agent.name is not None and agent.name != current
        ]
    )


async def speaker(db: Database, run: Run) -> str | None:
    """The name of the agent that answers `run` in an app with hand-offs: the thread's speaker, or
    for a resume, the agent that paused (it may have transferred the thread in the paused turn)."""
    if run.kind == "resume":
        for approval in await db.approvals.list(thread_id=run.thread_id):
            if approval.resume_run_id == run.run_id and approval.path:
                return approval.path[0]
    return (await db.threads.get(run.thread_id)).agent
