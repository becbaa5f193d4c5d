"""What a client saw is what the model gets, across a `kill -9`: a real server, on SQLite and PostgreSQL.

The issue's weather reproduction: a tool whose every run answers differently (a new random reading)
streams its result; the server is killed at once, while the model thinks about its answer; the
restarted server continues the run. The tool ran once; the event log, the stored conversation, the
AI SDK history and the model's answer all carry the reading the client saw.
"""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from pydantic_ai.messages import ModelMessagesTypeAdapter, ModelRequest, ToolReturnPart

from .live_server import LiveServer, SseEvent, auth, read_events
from .test_api import finished, new_thread, send

pytestmark = pytest.mark.anyio

APP = '''
"""A weather desk whose station answers differently every time it is asked."""

import asyncio
import os
import random
from pathlib import Path

from pydantic_ai import Agent
from pydantic_ai.messages import ModelRequest, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, FunctionModel

from agent import ChatApp


async def answer(messages, info: AgentInfo):
    last = messages[-1]
    returns = [p for p in last.parts if isinstance(p, ToolReturnPart)] if isinstance(last, ModelRequest) else []
    if not returns:
        yield {0: DeltaToolCall(name="weather", json_args='{"city": "Paris"}', tool_call_id="call_weather")}
        return
    await asyncio.sleep(float(os.environ.get("THINK_SECONDS", "0")))
    yield f"It is {returns[0].content} in Paris."


agent = Agent(FunctionModel(stream_function=answer), name="weather")


@agent.tool_plain
def weather(city: str) -> str:
    """The weather in `city` now."""
    with Path(os.environ["WEATHER_CALLS"]).open("a") as calls:
        calls.write(city + "\\n")
    return f"{random.randint(-10, 35)} °C, {random.choice(['overcast', 'windy', 'sunny', 'rainy'])}"


app = ChatApp(agent=agent)
'''


async def test_a_result_streamed_before_a_kill_is_the_one_the_model_answers_from(
    database_url: str, tmp_path: Path
) -> None:
    (tmp_path / "weather_desk.py").write_text(APP)
    calls = tmp_path / "calls.txt"
    env = {
        "WEATHER_CALLS": str(calls),
        "THINK_SECONDS": "120",  # the first process is killed while its model thinks
        "DURABLE_CHAT_LEASE_SECONDS": "3600",
        "DURABLE_CHAT_HEARTBEAT_SECONDS": "60",
    }
    server = LiveServer(database_url, tmp_path, env, app="weather_desk:app", model=None)
    server.start()
    try:
        token = server.token("alice")
        async with httpx.AsyncClient(base_url=server.base_url, timeout=30) as client:
            thread_id = await new_thread(client, token)
            run_id = await send(client, token, thread_id, "Weather in Paris?")
            seen = await read_events(client, thread_id, token, until=_has_result)
        server.kill()
        server.extra_env["THINK_SECONDS"] = "0"
        server.start()
        async with httpx.AsyncClient(base_url=server.base_url, timeout=30) as client:
            rest = await read_events(
                client, thread_id, token, last_event_id=seen[-1].event_id, until=finished(run_id)
            )
            detail = (await client.get(f"/api/threads/{thread_id}", headers=auth(token))).json()
            chat = (await client.get(f"/api/ai-sdk/chat/{thread_id}", headers=auth(token))).json()
    finally:
        server.stop()

    assert calls.read_text() == "Paris\n"  # the tool ran once
    [shown] = [e.data["content"] for e in seen + rest if e.type == "tool_result"]
    assert [e.type for e in rest] == ["run_started", "text_delta", "text_done", "run_finished"]
    assert rest[-1].data["output"] == f"It is {shown} in Paris."
    messages = ModelMessagesTypeAdapter.validate_python(detail["messages"])
    [stored] = [
        part.content
        for message in messages
        if isinstance(message, ModelRequest)
        for part in message.parts
        if isinstance(part, ToolReturnPart)
    ]
    assert stored == shown
    [assistant] = [m for m in chat["messages"] if m["role"] == "assistant"]
    [tool] = [p for p in assistant["parts"] if p["type"] == "tool-weather"]
    assert (tool["state"], tool["output"]) == ("output-available", shown)
    texts = "".join(p["text"] for p in assistant["parts"] if p["type"] == "text")
    assert texts == f"It is {shown} in Paris."


def _has_result(events: list[SseEvent]) -> bool:
    return bool(events) and events[-1].type == "tool_result"
