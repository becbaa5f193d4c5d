"""Other frameworks' conversation persistence, fed the same turns converted to their own message shapes.

Both optional (the `bench` extra): `open_*` raises `Unavailable` with the reason when one is missing.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from typing import Any

import aiosqlite
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from sqlalchemy.ext.asyncio import create_async_engine

from bench.store_systems import Backend, sqlite_path

__all__ = ["Unavailable", "open_langgraph", "open_openai_agents"]

# Items and checkpoints are untyped JSON-like dicts in both libraries' own signatures.
Item = dict[str, Any]


class Unavailable(Exception):
    """A system that can't be benchmarked here, and why."""


def openai_items(messages: Sequence[ModelMessage]) -> list[Item]:
    """The OpenAI Responses input items equivalent to `messages`, as the Agents SDK stores them."""
    items: list[Item] = []
    for message in messages:
        for part in message.parts:
            match part:
                case UserPromptPart(content=str(content)):
                    items.append({"role": "user", "content": content})
                case ToolReturnPart():
                    items.append(
                        {
                            "type": "function_call_output",
                            "call_id": part.tool_call_id,
                            "output": part.model_response_str(),
                        }
                    )
                case ToolCallPart():
                    items.append(
                        {
                            "type": "function_call",
                            "id": f"fc_{part.tool_call_id}",
                            "call_id": part.tool_call_id,
                            "name": part.tool_name,
                            "arguments": part.args_as_json_str(),
                            "status": "completed",
                        }
                    )
                case TextPart():
                    assert isinstance(message, ModelResponse)
                    items.append(
                        {
                            "type": "message",
                            "id": f"msg_{message.provider_response_id}",
                            "role": "assistant",
                            "status": "completed",
                            "content": [{"type": "output_text", "text": part.content, "annotations": []}],
                        }
                    )
                case _:
                    raise TypeError(f"no OpenAI item for {part!r}")
    return items


class OpenAIAgentsBackend(Backend):
    """The OpenAI Agents SDK's `SQLAlchemySession`: `get_items()` then `add_items()` per turn."""

    def __init__(self, engine: Any, session_class: Any) -> None:
        super().__init__("openai-agents SQLAlchemySession")
        self.engine = engine
        self._session_class = session_class
        self._sessions: dict[str, Any] = {}

    def session(self, conversation_id: str) -> Any:
        session = self._sessions.get(conversation_id)
        if session is None:
            session = self._session_class(conversation_id, engine=self.engine, create_tables=True)
            self._sessions[conversation_id] = session
        return session

    def convert(self, messages: Sequence[ModelMessage]) -> list[Item]:
        return openai_items(messages)

    async def load(self, conversation_id: str) -> None:
        await self.session(conversation_id).get_items()

    async def save(self, conversation_id: str, loaded: None, batch: list[Item]) -> None:
        await self.session(conversation_id).add_items(batch)

    async def aclose(self) -> None:
        await self.engine.dispose()


async def open_openai_agents(url: str) -> OpenAIAgentsBackend:
    try:
        sessions = importlib.import_module("agents.extensions.memory.sqlalchemy_session")
    except ImportError as error:
        raise Unavailable(f"openai-agents[sqlalchemy] is not installed ({error})") from error
    backend = OpenAIAgentsBackend(create_async_engine(url), sessions.SQLAlchemySession)
    await backend.session("setup").get_items()  # creates the tables outside the timed turns
    return backend


def langchain_messages(messages: Sequence[ModelMessage]) -> list[Any]:
    """The LangChain messages equivalent to `messages`, as a LangGraph `messages` channel holds them."""
    langchain = importlib.import_module("langchain_core.messages")
    converted: list[Any] = []
    for message in messages:
        if isinstance(message, ModelRequest):
            for part in message.parts:
                if isinstance(part, UserPromptPart):
                    converted.append(langchain.HumanMessage(content=str(part.content)))
                elif isinstance(part, ToolReturnPart):
                    converted.append(
                        langchain.ToolMessage(
                            content=part.model_response_str(), tool_call_id=part.tool_call_id
                        )
                    )
            continue
        usage = {
            "input_tokens": message.usage.input_tokens,
            "output_tokens": message.usage.output_tokens,
            "total_tokens": message.usage.input_tokens + message.usage.output_tokens,
        }
        calls = [
            {
                "name": part.tool_name,
                "args": part.args_as_dict(),
                "id": part.tool_call_id,
                "type": "tool_call",
            }
            for part in message.parts
            if isinstance(part, ToolCallPart)
        ]
        text = "".join(part.content for part in message.parts if isinstance(part, TextPart))
        converted.append(
            langchain.AIMessage(
                content=text,
                tool_calls=calls,
                usage_metadata=usage,
                response_metadata={"model_name": message.model_name, "finish_reason": message.finish_reason},
                id=message.provider_response_id,
            )
        )
    return converted


class LangGraphBackend(Backend):
    """LangGraph's `AsyncSqliteSaver`: `aget_tuple` then `aput` of a checkpoint holding the whole list."""

    def __init__(self, saver: Any, connection: Any) -> None:
        super().__init__("LangGraph AsyncSqliteSaver")
        self.saver = saver
        self.connection = connection

    def convert(self, messages: Sequence[ModelMessage]) -> list[Any]:
        return langchain_messages(messages)

    async def load(self, conversation_id: str) -> tuple[dict[str, Any], list[Any], int]:
        """The config to save under, the history and the next step."""
        config: dict[str, Any] = {"configurable": {"thread_id": conversation_id, "checkpoint_ns": ""}}
        current = await self.saver.aget_tuple(config)
        if current is None:
            return config, [], 0
        return (
            current.config,
            current.checkpoint["channel_values"]["messages"],
            current.metadata.get("step", 0) + 1,
        )

    async def save(
        self, conversation_id: str, loaded: tuple[dict[str, Any], list[Any], int], batch: list[Any]
    ) -> None:
        config, history, step = loaded
        checkpoint = importlib.import_module("langgraph.checkpoint.base").empty_checkpoint()
        checkpoint["channel_values"] = {"messages": [*history, *batch]}
        checkpoint["channel_versions"] = {"messages": step + 1}
        await self.saver.aput(config, checkpoint, {"source": "loop", "step": step}, {"messages": step + 1})

    async def aclose(self) -> None:
        await self.connection.close()


async def open_langgraph(url: str) -> LangGraphBackend:
    if (path := sqlite_path(url)) is None:
        raise Unavailable("LangGraph's saver is measured on SQLite only (its PostgreSQL saver needs psycopg)")
    try:
        savers = importlib.import_module("langgraph.checkpoint.sqlite.aio")
        importlib.import_module("langchain_core.messages")  # the channel holds LangChain messages
    except ImportError as error:
        raise Unavailable(f"langgraph-checkpoint-sqlite is not installed ({error})") from error
    connection = await aiosqlite.connect(path)
    saver = savers.AsyncSqliteSaver(connection)
    await saver.setup()
    return LangGraphBackend(saver, connection)
