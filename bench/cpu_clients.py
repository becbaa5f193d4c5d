"""The clients of `bench.cpu`: simulated users taking turns for a set time, over either protocol.

- `native`: each user creates a thread and opens its event stream before the round starts (not
  counted), then sends `POST /api/threads/{id}/messages` and reads the stream to `run_finished`,
  turn after turn.
- `ai-sdk`: each user is a `useChat` client of a new chat: one `POST /api/ai-sdk/chat` per turn
  whose answer is the turn's UI message stream, read to its end; the body holds the whole
  conversation so far (the assistant messages rebuilt from the chunks, tool parts included), as
  the AI SDK sends it. Ours reads only the last message; the baseline, having no store, all of them.

A user starts no new turn once the round's time is up; the round ends when every user's turn has,
so every turn counted ran whole inside the round. A turn counts if it ended as the demo turn does
(its text names the order); anything else is an error, by kind.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import ssl
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import httpx

from bench.web_load import (
    PROMPT,
    _End,  # pyright: ignore[reportPrivateUsage] -- one SSE parser for every benchmark
    _Event,  # pyright: ignore[reportPrivateUsage]
    _read_events,  # pyright: ignore[reportPrivateUsage]
)
from bench.web_tokens import issue_token

__all__ = ("Protocol", "RoundResult", "run_round")

Protocol = Literal["native", "ai-sdk"]
_EXPECTED = "ORD-5678"


@dataclass
class RoundResult:
    turns: int = 0
    elapsed: float = 0.0
    first_delta: list[float] = field(default_factory=list[float])
    """Seconds from sending the POST to receiving the turn's first text delta."""
    errors: Counter[str] = field(default_factory=Counter[str])
    samples: dict[str, str] = field(default_factory=dict[str, str])

    def error(self, kind: str, detail: str = "") -> None:
        self.errors[kind] += 1
        self.samples.setdefault(kind, detail[:300] or kind)


async def run_round(
    base_url: str,
    protocol: Protocol,
    *,
    users: int,
    seconds: float,
    secret: str,
    turns: int | None = None,
    on_start: Callable[[], None] = lambda: None,
) -> RoundResult:
    """`users` users taking turns for `seconds` (or `turns` each, if given); `on_start` marks the start.

    `on_start` is called once every user is ready (threads made, streams open), right before the
    first turn, so that the set-up is not counted.
    """
    result = RoundResult()
    ready, go = asyncio.Barrier(users + 1), asyncio.Event()
    stop = [0.0]
    timeout = httpx.Timeout(connect=60.0, read=120.0, write=60.0, pool=None)
    tls = ssl.create_default_context()  # never used (plain HTTP), built once rather than per client
    async with contextlib.AsyncExitStack() as stack:
        clients = [
            await stack.enter_async_context(
                httpx.AsyncClient(base_url=base_url, timeout=timeout, verify=tls, limits=httpx.Limits())
            )
            for _ in range(users)
        ]
        user = _native if protocol == "native" else _ai_sdk
        tasks = [
            asyncio.create_task(
                user(
                    clients[n],
                    f"user{n}",
                    secret,
                    ready,
                    go,
                    lambda: time.perf_counter() < stop[0],
                    turns,
                    result,
                )
            )
            for n in range(users)
        ]
        await asyncio.wait_for(ready.wait(), 120)
        on_start()
        started = time.perf_counter()
        stop[0] = started + (seconds if turns is None else 1e9)
        go.set()
        await asyncio.gather(*tasks, return_exceptions=True)
        result.elapsed = time.perf_counter() - started
        for task in tasks:
            if (error := task.exception()) is not None:
                result.error(f"client {type(error).__name__}", repr(error))
    return result


async def _native(
    client: httpx.AsyncClient,
    user_id: str,
    secret: str,
    ready: asyncio.Barrier,
    go: asyncio.Event,
    running: Callable[[], bool],
    turns: int | None,
    result: RoundResult,
) -> None:
    headers = {"Authorization": f"Bearer {issue_token(secret, user_id)}"}
    arrived = False
    try:
        made = await client.post("/api/threads", json={"title": "bench"}, headers=headers)
        made.raise_for_status()
        thread_id = str(made.json()["thread_id"])
        async with client.stream("GET", f"/api/threads/{thread_id}/events", headers=headers) as stream:
            stream.raise_for_status()
            queue: asyncio.Queue[_Event | _End] = asyncio.Queue()
            reader = asyncio.create_task(_read_events(stream, queue))
            try:
                await ready.wait()
                arrived = True
                await go.wait()
                done = 0
                while running() and (turns is None or done < turns):
                    sent = time.perf_counter()
                    answer = await client.post(
                        f"/api/threads/{thread_id}/messages", json={"content": PROMPT}, headers=headers
                    )
                    if answer.status_code != 202:
                        result.error(f"POST messages {answer.status_code}", answer.text)
                        return
                    first: float | None = None
                    while True:
                        item = await asyncio.wait_for(queue.get(), 120)
                        if isinstance(item, _End):
                            result.error("dropped stream", repr(item.error))
                            return
                        if item.type == "text_delta" and first is None:
                            first = item.received - sent
                        if item.type == "run_finished":
                            break
                    if item.data.get("status") != "completed" or _EXPECTED not in str(
                        item.data.get("output")
                    ):
                        result.error("wrong turn", json.dumps(item.data))
                        return
                    result.turns += 1
                    done += 1
                    if first is not None:
                        result.first_delta.append(first)
            finally:
                reader.cancel()
    except (httpx.HTTPError, TimeoutError) as error:
        result.error(f"transport {type(error).__name__}", repr(error))
    finally:
        if not arrived:  # failed before the start: the others must not wait for it
            await ready.wait()


async def _ai_sdk(
    client: httpx.AsyncClient,
    user_id: str,
    secret: str,
    ready: asyncio.Barrier,
    go: asyncio.Event,
    running: Callable[[], bool],
    turns: int | None,
    result: RoundResult,
) -> None:
    headers = {"Authorization": f"Bearer {issue_token(secret, user_id)}"}
    chat_id = str(uuid.uuid4())
    history: list[dict[str, Any]] = []
    arrived = False
    try:
        await ready.wait()
        arrived = True
        await go.wait()
        done = 0
        while running() and (turns is None or done < turns):
            message = {"id": str(uuid.uuid4()), "role": "user", "parts": [{"type": "text", "text": PROMPT}]}
            body = {"id": chat_id, "messages": [*history, message], "trigger": "submit-message"}
            sent = time.perf_counter()
            first: float | None = None
            chunks: list[dict[str, Any]] = []
            async with client.stream("POST", "/api/ai-sdk/chat", json=body, headers=headers) as stream:
                if stream.status_code != 200:
                    await stream.aread()
                    result.error(f"POST chat {stream.status_code}", stream.text)
                    return
                async for line in stream.aiter_lines():
                    if not line.startswith("data: ") or line == "data: [DONE]":
                        continue
                    chunk = json.loads(line[6:])
                    if chunk.get("type") == "text-delta" and first is None:
                        first = time.perf_counter() - sent
                    chunks.append(chunk)
            reply = assistant_message(chunks)
            text = "".join(str(part.get("text", "")) for part in reply["parts"] if part["type"] == "text")
            if not chunks or chunks[-1].get("type") != "finish" or _EXPECTED not in text:
                result.error("wrong turn", json.dumps(chunks[-3:]))
                return
            history += [message, reply]
            result.turns += 1
            done += 1
            if first is not None:
                result.first_delta.append(first)
    except (httpx.HTTPError, TimeoutError) as error:
        result.error(f"transport {type(error).__name__}", repr(error))
    finally:
        if not arrived:  # failed before the start: the others must not wait for it
            await ready.wait()


def assistant_message(chunks: list[dict[str, Any]]) -> dict[str, Any]:
    """The `UIMessage` `useChat` builds from one turn's chunks: steps, tool calls with results, text."""
    parts: list[dict[str, Any]] = []
    tools: dict[str, dict[str, Any]] = {}
    texts: dict[str, dict[str, Any]] = {}
    message_id = str(uuid.uuid4())
    for chunk in chunks:
        match chunk.get("type"):
            case "start" if chunk.get("messageId"):
                message_id = str(chunk["messageId"])
            case "start-step":
                parts.append({"type": "step-start"})
            case "tool-input-available":
                part = {
                    "type": f"tool-{chunk['toolName']}",
                    "toolCallId": chunk["toolCallId"],
                    "state": "input-available",
                    "input": chunk.get("input"),
                }
                tools[str(chunk["toolCallId"])] = part
                parts.append(part)
            case "tool-output-available" if str(chunk.get("toolCallId")) in tools:
                tools[str(chunk["toolCallId"])].update(state="output-available", output=chunk.get("output"))
            case "text-start":
                texts[str(chunk["id"])] = part = {"type": "text", "text": "", "state": "done"}
                parts.append(part)
            case "text-delta" if str(chunk.get("id")) in texts:
                texts[str(chunk["id"])]["text"] += str(chunk.get("delta", ""))
            case _:
                pass
    return {"id": message_id, "role": "assistant", "parts": parts}
