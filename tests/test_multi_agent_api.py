"""Several agents over the HTTP API, in process: a nested approval's agent and chain on every approval
object, its edited arguments checked against the inner agent's schema, the delegated agent's own
conversation readable; hand-offs and the thread's `agent`. On SQLite and PostgreSQL."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from pydantic_ai import Agent, RunContext
from pydantic_ai.messages import ModelMessage
from pydantic_ai.models.function import AgentInfo, FunctionModel

from agent import ChatApp, RunScope, decide, open_runtime, run_step
from store import Database, NewRun
from stream import AgentChanged, TextDelta, TextDone, event_from_data
from web import Settings, create_app, issue_token

from .agent_chains import Chain
from .conformance import Scripted
from .test_delegation_checkpoints import booking_agent, counted_model, router_model
from .waiting import eventually

pytestmark = pytest.mark.anyio

SECRET = "multi-agent-api-secret"
HEADERS = {"Authorization": f"Bearer {issue_token(SECRET, 'alice')}"}
OTHER = {"Authorization": f"Bearer {issue_token(SECRET, 'mallory')}"}
Json = dict[str, Any]


@asynccontextmanager
async def served(app: ChatApp[Any], database_url: str, data_dir: Path) -> AsyncGenerator[httpx.AsyncClient]:
    settings = Settings(database_url=database_url, secret=SECRET, data_dir=data_dir)
    web = create_app(settings, app=app)
    async with (
        web.router.lifespan_context(web),
        httpx.AsyncClient(transport=httpx.ASGITransport(app=web), base_url="http://test", timeout=30) as api,
    ):
        yield api


async def new_thread(api: httpx.AsyncClient) -> str:
    response = await api.post("/api/threads", json={}, headers=HEADERS)
    assert response.status_code == 201, response.text
    return str(response.json()["thread_id"])


async def send(api: httpx.AsyncClient, thread_id: str, content: str) -> None:
    response = await api.post(
        f"/api/threads/{thread_id}/messages", json={"content": content}, headers=HEADERS
    )
    assert response.status_code == 202, response.text


async def until(api: httpx.AsyncClient, thread_id: str, done: Callable[[Json], bool]) -> Json:

    async def done_yet() -> Json | None:
        detail: Json = (await api.get(f"/api/threads/{thread_id}", headers=HEADERS)).json()
        return detail if done(detail) else None

    return await eventually(done_yet)


async def test_a_nested_approval_over_the_api(database_url: str, tmp_path: Path) -> None:
    chain = Chain(2, approval=True)
    async with served(chain.app(), database_url, tmp_path) as api:
        thread_id = await new_thread(api)
        await send(api, thread_id, "Book Paris")
        detail = await until(api, thread_id, lambda d: d["status"] == "awaiting_approval")
        [pending] = detail["pending_approvals"]
        listed = (await api.get("/api/approvals?status=pending", headers=HEADERS)).json()["approvals"]
        approve = f"/api/threads/{thread_id}/tool-calls/{pending['tool_call_id']}/approve"
        refused = await api.post(approve, json={"override_args": {"cents": "many"}}, headers=HEADERS)
        approved = await api.post(approve, json={"override_args": {"cents": 42}}, headers=HEADERS)
        done = await until(api, thread_id, lambda d: d["status"] == "idle" and len(d["messages"]) >= 4)
        booking = await api.get(f"/api/threads/{thread_id}/tool-calls/travel_0_0/messages", headers=HEADERS)
        payments = await api.get(f"/api/threads/{thread_id}/tool-calls/booking_0_0/messages", headers=HEADERS)
        unknown = await api.get(f"/api/threads/{thread_id}/tool-calls/nope/messages", headers=HEADERS)
        foreign = await api.get(f"/api/threads/{thread_id}/tool-calls/travel_0_0/messages", headers=OTHER)

    assert (pending["tool_name"], pending["args"], pending["agent"], pending["path"]) == (
        "charge",
        {"cents": 300},
        "payments",
        ["travel", "booking", "payments"],
    )
    assert [(a["agent"], a["path"]) for a in listed] == [("payments", ["travel", "booking", "payments"])]
    assert refused.status_code == 422
    assert refused.json()["error"]["code"] == "invalid_arguments"
    assert approved.status_code == 200
    assert approved.json()["run_id"] is not None
    assert chain.ran["charge payments"] == 1
    assert [(a["status"], a["override_args"], a["agent"]) for a in done["approvals"]] == [
        ("approved", {"cents": 42}, "payments")
    ]
    assert booking.status_code == 200
    assert booking.json()["messages"][-1]["parts"][0]["content"] == "booking done"
    assert payments.status_code == 200
    returned = [p for m in payments.json()["messages"] for p in m["parts"] if p["part_kind"] == "tool-return"]
    assert [(p["tool_name"], p["content"]) for p in returned] == [("charge", "payments charged 42")]
    for missing in (unknown, foreign):
        assert missing.status_code == 404
        assert missing.json()["error"]["code"] == "not_found"


async def test_each_agent_a_call_delegated_to_has_its_conversation_over_the_api(
    database_url: str, tmp_path: Path
) -> None:
    # A tool delegating to two agents in turn: the first's conversation at the call's id, the second's
    # at `{id}~2`, nothing at `{id}~3`.
    calls = Counter[str]()
    booking = booking_agent(calls)
    hotels = Agent(counted_model("hotels", ("look", {}), "room 12", calls), name="hotels", deps_type=RunScope)
    hotels.tool_plain(name="look")(lambda: "12")
    router = Agent(router_model(calls, "ask"), name="router", deps_type=RunScope)

    @router.tool
    async def ask(ctx: RunContext[RunScope], task: str) -> str:  # pyright: ignore[reportUnusedFunction]
        """Ask the booking agent, then the hotels agent."""
        seat = await ctx.deps.delegate(ctx, booking, task, deps=ctx.deps)
        room = await ctx.deps.delegate(ctx, hotels, task, deps=ctx.deps)
        return f"{seat}, {room}"

    app = ChatApp(agent=router, deps=lambda scope: scope)
    async with served(app, database_url, tmp_path) as api:
        thread_id = await new_thread(api)
        await send(api, thread_id, "Book")
        await until(api, thread_id, lambda d: d["status"] == "idle" and len(d["messages"]) >= 2)
        base = f"/api/threads/{thread_id}/tool-calls"
        first, second, third = [
            await api.get(f"{base}/{call}/messages", headers=HEADERS)
            for call in ("ask_1", "ask_1~2", "ask_1~3")
        ]
    answers = [
        [p["content"] for m in response.json()["messages"] for p in m["parts"] if p["part_kind"] == "text"]
        for response in (first, second)
    ]
    assert (first.status_code, second.status_code) == (200, 200)
    assert (first.json()["tool_call_id"], second.json()["tool_call_id"]) == ("ask_1", "ask_1~2")
    assert answers == [["seat 3A"], ["room 12"]]
    assert third.status_code == 404
    assert third.json()["error"]["code"] == "not_found"


def desk() -> ChatApp[Any]:
    """A router that hands the conversation to billing, which hands it back."""
    router_script = Scripted([[("transfer_to_billing", {})], "billing will help", "router again"], prefix="r")
    billing_script = Scripted(["billing here", [("transfer_to_router", {})], "router takes over"], prefix="b")
    router = Agent(router_script.model(), name="router")
    billing = Agent(billing_script.model(), name="billing")
    return ChatApp(agent=router, handoffs=[billing])


async def test_a_hand_off_and_back_survives_a_restart(database_url: str, tmp_path: Path) -> None:
    app = desk()

    def replies(n: int) -> Callable[[Json], bool]:
        return lambda d: d["status"] == "idle" and sum(m["kind"] == "response" for m in d["messages"]) >= n

    async with served(app, database_url, tmp_path) as api:
        thread_id = await new_thread(api)
        await send(api, thread_id, "My invoice is wrong")
        first = await until(api, thread_id, replies(2))
    async with served(app, database_url, tmp_path) as api:  # a restart: the thread's speaker is stored
        await send(api, thread_id, "Invoice 7")
        second = await until(api, thread_id, replies(3))
        await send(api, thread_id, "Now my order")
        third = await until(api, thread_id, replies(5))
        await send(api, thread_id, "Anything else?")
        await until(api, thread_id, replies(6))
        listed = (await api.get("/api/threads", headers=HEADERS)).json()["threads"]
    async with open_runtime(app, database_url) as runtime:
        log = [event_from_data(e.type, e.data) for e in await runtime.db.events.read(thread_id)]

    assert first["agent"] == "billing"
    # Each stored reply says which agent gave it.
    said = [m["provider_details"]["durable_chat_agent"] for m in third["messages"] if m["kind"] == "response"]
    assert said == ["router", "router", "billing", "billing", "billing"]
    assert second["agent"] == "billing"
    assert third["agent"] == "router"
    assert [t.get("agent") for t in listed] == ["router"]
    changes = [(e.agent, e.previous) for e in log if isinstance(e, AgentChanged)]
    assert changes == [("billing", "router"), ("router", "billing")]
    texts = [(e.agent, e.text) for e in log if isinstance(e, TextDone)]
    assert texts == [
        ("router", "billing will help"),
        ("billing", "billing here"),
        ("billing", "router takes over"),
        ("router", "router again"),
    ]
    # Who spoke, on every event of the turns.
    assert all(e.agent in ("router", "billing") for e in log if e.type not in ("run_started", "user_message"))


async def test_the_agent_handed_to_pauses_for_its_own_approvals(database_url: str) -> None:
    router = Agent(
        Scripted([[("transfer_to_billing", {})], "over to billing"], prefix="r").model(), name="router"
    )
    billing = Agent(Scripted([[("refund", {"cents": 5})], "refunded"], prefix="b").model(), name="billing")
    refunded: list[int] = []

    @billing.tool_plain(requires_approval=True)
    def refund(cents: int) -> str:  # pyright: ignore[reportUnusedFunction]
        """Refund `cents`."""
        refunded.append(cents)
        return f"refunded {cents}"

    async with open_runtime(ChatApp(agent=router, handoffs=[billing]), database_url) as runtime:
        thread = await runtime.db.threads.create(user_id="alice", title="t")
        for content in ("Refund me", "Five cents"):
            run = (
                await runtime.db.runs.queue(
                    NewRun(thread_id=thread.thread_id, kind="message", content=content)
                )
            ).run
            status = await run_step(runtime, run.run_id)
        [pending] = await runtime.db.approvals.list(thread_id=thread.thread_id, status="pending")
        decision = await decide(
            runtime.db, thread.thread_id, pending.tool_call_id, decision="approved", decided_by="a"
        )
        assert decision.resume_run_id is not None
        resumed = await run_step(runtime, decision.resume_run_id)
    assert status == "awaiting_approval"
    assert (pending.tool_name, pending.agent, pending.path) == ("refund", "billing", ("billing",))
    assert resumed == "completed"
    assert refunded == [5]


async def test_a_turn_that_transfers_and_pauses_resumes_with_the_agent_that_paused(database_url: str) -> None:
    router_script = Scripted(
        [[("transfer_to_billing", {}), ("note", {"text": "vip"})], "noted; billing next"]
    )
    router = Agent(router_script.model(), name="router")
    billing = Agent(Scripted(["billing here"], prefix="b").model(), name="billing")

    @router.tool_plain(requires_approval=True)
    def note(text: str) -> str:  # pyright: ignore[reportUnusedFunction]
        """Note `text` on the account."""
        return f"noted {text}"

    async with open_runtime(ChatApp(agent=router, handoffs=[billing]), database_url) as runtime:
        thread = await runtime.db.threads.create(user_id="alice", title="t")
        run = (
            await runtime.db.runs.queue(
                NewRun(thread_id=thread.thread_id, kind="message", content="Note vip, then billing")
            )
        ).run
        assert await run_step(runtime, run.run_id) == "awaiting_approval"
        [pending] = await runtime.db.approvals.list(thread_id=thread.thread_id, status="pending")
        decision = await decide(
            runtime.db, thread.thread_id, pending.tool_call_id, decision="approved", decided_by="a"
        )
        assert decision.resume_run_id is not None
        assert await run_step(runtime, decision.resume_run_id) == "completed"
        after = (
            await runtime.db.runs.queue(
                NewRun(thread_id=thread.thread_id, kind="message", content="Invoice 7")
            )
        ).run
        assert await run_step(runtime, after.run_id) == "completed"
        log = [event_from_data(e.type, e.data) for e in await runtime.db.events.read(thread.thread_id)]
    assert pending.path == ("router",)
    assert [(e.agent, e.text) for e in log if isinstance(e, TextDone)] == [
        ("router", "noted; billing next"),
        ("billing", "billing here"),
    ]


def cut_off_desk() -> ChatApp[Any]:
    """Travel delegates to booking, whose model says something and then waits until the run is cancelled."""
    travel = Agent(
        Scripted([[("ask_booking", {"task": "book"})], "never"], prefix="travel").model(),
        name="travel",
        deps_type=RunScope,
    )

    async def booking_says(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str]:
        yield "Looking for rooms"
        await anyio.Event().wait()  # until the run is cancelled
        yield "never"

    booking = Agent(FunctionModel(stream_function=booking_says), name="booking", deps_type=RunScope)

    async def ask_booking(ctx: RunContext[RunScope], task: str) -> str:
        return await ctx.deps.delegate(ctx, booking, task, deps=ctx.deps)

    travel.tool(ask_booking)
    return ChatApp(agent=travel, deps=lambda scope: scope)


def ag_ui_frames(response: httpx.Response) -> list[Json]:
    assert response.status_code == 200, response.text
    return [
        json.loads(line.removeprefix("data: "))
        for line in response.text.split("\n")
        if line.startswith("data: ")
    ]


async def test_ag_ui_closes_the_subagents_of_a_cancelled_run(database_url: str, tmp_path: Path) -> None:
    body = {
        "threadId": "desk-1",
        "runId": "r1",
        "messages": [{"id": "u1", "role": "user", "content": "Book"}],
    }
    answer: list[httpx.Response] = []
    async with served(cut_off_desk(), database_url, tmp_path) as api:

        async def run() -> None:
            answer.append(await api.post("/api/ag-ui", json=body, headers=HEADERS))

        async with anyio.create_task_group() as tasks:
            tasks.start_soon(run)
            (thread,) = await eventually(lambda: _threads(api))
            thread_id = str(thread["thread_id"])
            await eventually(lambda: _booking_spoke(database_url, thread_id))
            cancelled = await api.post(f"/api/threads/{thread_id}/cancel", headers=HEADERS)
            assert cancelled.status_code == 200, cancelled.text

    frames = ag_ui_frames(answer[0])
    subagents = [f for f in frames if str(f["type"]).startswith("SUBAGENT_")]
    assert [(f["type"], f["subagentRunId"], f.get("code")) for f in subagents] == [
        ("SUBAGENT_STARTED", "travel_0_0", None),
        ("SUBAGENT_ERROR", "travel_0_0", "cancelled"),
    ]
    assert frames[-2:] == [
        subagents[-1],  # closed right before the run's end
        {"type": "RUN_FINISHED", "threadId": "desk-1", "runId": "r1", "outcome": {"type": "cancelled"}},
    ]


async def _threads(api: httpx.AsyncClient) -> list[Json] | None:
    threads: list[Json] = (await api.get("/api/threads", headers=HEADERS)).json()["threads"]
    return threads or None


async def _booking_spoke(database_url: str, thread_id: str) -> bool | None:
    """Whether booking's first words are in the thread's log (what the stream tells the client)."""
    db = await Database.connect(database_url)
    try:
        log = [event_from_data(e.type, e.data) for e in await db.events.read(thread_id)]
    finally:
        await db.aclose()
    return any(isinstance(e, TextDelta) and e.agent == "booking" for e in log) or None
