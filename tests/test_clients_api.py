"""The AI SDK, AG-UI and regenerate endpoints in process: flows over the durable machinery, and every bad request.

The app runs with its lifespan (database, runner, broker) under httpx's ASGI transport; a stream
answer is read whole, since each one ends when its run does. It serves the core tests' own app
(`core_app`) on a scripted model, one script per test: `transfer` needs approval.
"""

from __future__ import annotations

import gc
import json
import sys
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack
from pathlib import Path

import anyio
import httpx
import pytest
from starlette.types import Message, Receive, Scope, Send

from web import Settings, create_app, issue_token

from .core_app import core_app
from .scripted import Calls, Script

pytestmark = pytest.mark.anyio

SECRET = "clients-api-secret"
CHAT = "/api/ai-sdk/chat"
LOOKUP = Calls([("lookup", {"key": "balance"})])
TRANSFER = Calls([("transfer", {"to": "bob", "amount": 25.5})])

OpenApi = Callable[[Script], Awaitable[httpx.AsyncClient]]


@pytest.fixture
async def open_api(database_url: str, tmp_path: Path) -> AsyncIterator[OpenApi]:
    """Serves `core_app(script)` in process: `api = await open_api(script)`."""
    async with AsyncExitStack() as stack:

        async def open_one(script: Script) -> httpx.AsyncClient:
            settings = Settings(database_url=database_url, secret=SECRET, data_dir=tmp_path)
            app = create_app(settings, app=core_app(script))
            await stack.enter_async_context(app.router.lifespan_context(app))
            transport = httpx.ASGITransport(app=app)
            client = httpx.AsyncClient(transport=transport, base_url="http://test", timeout=30)
            return await stack.enter_async_context(client)

        yield open_one


def auth(user: str = "alice") -> dict[str, str]:
    return {"Authorization": f"Bearer {issue_token(SECRET, user)}"}


def chunks(response: httpx.Response) -> list[dict[str, object] | str]:
    """The `data:` payloads of an SSE answer: JSON objects, and `[DONE]` as is."""
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/event-stream")
    out: list[dict[str, object] | str] = []
    for frame in response.text.split("\n\n"):
        for line in frame.split("\n"):
            if line.startswith("data: "):
                payload = line.removeprefix("data: ")
                out.append(payload if payload == "[DONE]" else json.loads(payload))
    return out


def types(response: httpx.Response) -> list[str]:
    return [c if isinstance(c, str) else str(c["type"]) for c in chunks(response)]


def error(response: httpx.Response) -> tuple[int, str]:
    body = response.json()
    assert set(body) == {"error"}
    assert isinstance(body["error"]["message"], str)
    return response.status_code, body["error"]["code"]


def user_message(text: str, message_id: str | None = None) -> dict[str, object]:
    """A user message as the AI SDK sends it; a new id unless given (the id is the idempotency key)."""
    return {"id": message_id or uuid.uuid4().hex, "role": "user", "parts": [{"type": "text", "text": text}]}


def responded(call_id: str, approved: object, reason: str | None = None) -> dict[str, object]:
    """An assistant message as AI SDK 7 sends it back after `addToolApprovalResponse`."""
    approval: dict[str, object] = {
        "id": call_id,
        "approved": approved,
        "isAutomatic": False,
        "signature": "sig",
    }
    if reason is not None:
        approval["reason"] = reason
    part = {
        "type": "tool-x",
        "toolCallId": call_id,
        "state": "approval-responded",
        "input": {},
        "approval": approval,
    }
    return {"id": "a1", "role": "assistant", "parts": [part]}


def submit(chat_id: str, *messages: dict[str, object]) -> dict[str, object]:
    return {"id": chat_id, "trigger": "submit-message", "messages": list(messages), "messageId": None}


async def paused_call(api: httpx.AsyncClient, chat_id: str, text: str = "Send bob 25.50") -> str:
    response = await api.post(CHAT, json=submit(chat_id, user_message(text)), headers=auth())
    requests = [c for c in chunks(response) if isinstance(c, dict) and c["type"] == "tool-approval-request"]
    assert len(requests) == 1, response.text
    (request,) = requests
    return str(request["toolCallId"])


async def only_thread(api: httpx.AsyncClient, user: str = "alice") -> dict[str, object]:
    (thread,) = (await api.get("/api/threads", headers=auth(user))).json()["threads"]
    return thread


# -- writes -------------------------------------------------------------------------------------------


async def test_an_answer_is_written_a_batch_of_events_at_a_time(database_url: str, tmp_path: Path) -> None:
    settings = Settings(database_url=database_url, secret=SECRET, data_dir=tmp_path)
    app = create_app(settings, app=core_app(Script([LOOKUP, "The balance is 10."])))
    writes: list[bytes] = []

    async def recording(scope: Scope, receive: Receive, send: Send) -> None:
        async def send_recorded(message: Message) -> None:
            if message["type"] == "http.response.body" and scope["path"] == CHAT:
                writes.append(bytes(message.get("body", b"")))
            await send(message)

        await app(scope, receive, send_recorded)

    transport = httpx.ASGITransport(app=recording)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=transport, base_url="http://test", timeout=30) as api,
    ):
        answer = await api.post(CHAT, json=submit("chat-w", user_message("My balance?")), headers=auth())
    frames = [write.count(b"\n\n") for write in writes]
    assert sum(frames) == len(chunks(answer))
    assert writes[-1] == b""  # the end of the body
    # The start goes with the first chunks (the step's, the call's); the end (the step's end,
    # `finish`, `[DONE]`) with the last batch's, in one write.
    assert writes[0].startswith(b'data: {"type":"start"')
    assert frames[0] >= 3
    assert writes[-2].endswith(b"data: [DONE]\n\n")
    assert frames[-2] >= 3
    assert len(writes) - 1 < len(chunks(answer))


async def test_an_answer_that_ends_closes_what_it_read_itself(open_api: OpenApi) -> None:
    # Left to the garbage collector, each generator costs the loop a task and a self-pipe wake-up,
    # and the broker subscription lives until then.
    hooks = sys.get_asyncgen_hooks()
    finalized: list[str] = []

    def finalizer(generator: AsyncGenerator[object]) -> None:
        finalized.append(generator.__qualname__)
        assert hooks.finalizer is not None
        hooks.finalizer(generator)

    sys.set_asyncgen_hooks(firstiter=hooks.firstiter, finalizer=finalizer)
    try:
        api = await open_api(Script([LOOKUP, "The balance is 10."]))
        answer = await api.post(CHAT, json=submit("chat-c", user_message("My balance?")), headers=auth())
        assert types(answer)[-1] == "[DONE]"
        gc.collect()
        await anyio.lowlevel.checkpoint()
    finally:
        sys.set_asyncgen_hooks(*hooks)
    assert finalized == []


# -- flows --------------------------------------------------------------------------------------------


async def test_an_approval_from_the_ai_sdk_is_the_native_decision(open_api: OpenApi) -> None:
    api = await open_api(Script([LOOKUP, TRANSFER, "Sent 25.50 to bob."]))
    call_id = await paused_call(api, "chat-a")
    thread = await only_thread(api)
    assert thread["status"] == "awaiting_approval"

    answer = await api.post(
        CHAT, json=submit("chat-a", user_message("x"), responded(call_id, True)), headers=auth()
    )
    assert answer.headers["x-vercel-ai-ui-message-stream"] == "v1"
    assert types(answer) == [
        "start",
        "message-metadata",  # who speaks: {"agent": "support"}
        "tool-output-available",
        "start-step",
        "text-start",
        *["text-delta"] * 4,
        "text-end",
        "finish-step",
        "finish",
        "[DONE]",
    ]
    detail = (await api.get(f"/api/threads/{thread['thread_id']}", headers=auth())).json()
    assert detail["status"] == "idle"
    (approval,) = (await api.get("/api/approvals", headers=auth())).json()["approvals"]
    assert (approval["status"], approval["decided_by"], approval["tool_call_id"]) == (
        "approved",
        "alice",
        call_id,
    )

    # The same answer again changes nothing and streams the same resumed run; the opposite is refused.
    again = await api.post(CHAT, json=submit("chat-a", responded(call_id, True)), headers=auth())
    assert types(again) == types(answer)
    opposite = await api.post(CHAT, json=submit("chat-a", responded(call_id, False)), headers=auth())
    assert error(opposite) == (409, "already_decided")
    after = (await api.get(f"/api/threads/{thread['thread_id']}", headers=auth())).json()
    assert after["messages"] == detail["messages"]  # nothing ran twice
    assert [m["kind"] for m in after["messages"]].count("response") == 3  # lookup, transfer, the reply


async def test_a_message_id_is_the_idempotency_key_and_the_history_keeps_it(open_api: OpenApi) -> None:
    api = await open_api(Script(["Hello!"]))
    body = submit("chat-b", user_message("Hello", message_id="client-1"))
    first = await api.post(CHAT, json=body, headers=auth())
    second = await api.post(CHAT, json=body, headers=auth())
    assert chunks(first)[0] == chunks(second)[0]  # the same run, streamed again from its start
    history = (await api.get(f"{CHAT}/chat-b", headers=auth())).json()
    assert history["id"] == "chat-b"
    assert [(m["id"], m["role"]) for m in history["messages"]] == [
        ("client-1", "user"),
        (chunks(first)[0]["messageId"], "assistant"),  # pyright: ignore[reportIndexIssue, reportArgumentType, reportCallIssue]
    ]
    assert (await api.get(f"{CHAT}/chat-b/stream", headers=auth())).status_code == 204


async def test_chat_ids_are_scoped_to_their_user(open_api: OpenApi) -> None:
    api = await open_api(Script([TRANSFER, "Hello, Bob."]))
    await paused_call(api, "shared-id")
    # Bob's chat of the same id is his own, empty thread: Alice's is out of reach.
    assert (await api.get(f"{CHAT}/shared-id", headers=auth("bob"))).json() == {
        "id": "shared-id",
        "messages": [],
    }
    assert (await api.get(f"{CHAT}/shared-id/stream", headers=auth("bob"))).status_code == 204
    alices = await only_thread(api)
    # Naming Alice's thread by its own id does not reach it either: it is only another chat id for Bob.
    by_thread_id = await api.get(f"{CHAT}/{alices['thread_id']}", headers=auth("bob"))
    assert by_thread_id.json() == {"id": alices["thread_id"], "messages": []}
    bob = await api.post(CHAT, json=submit("shared-id", user_message("Hello")), headers=auth("bob"))
    assert types(bob)[-1] == "[DONE]"
    bobs = await only_thread(api, "bob")
    assert bobs["thread_id"] != alices["thread_id"]
    assert (await only_thread(api))["status"] == "awaiting_approval"


async def test_a_native_thread_is_a_chat_by_its_own_id(open_api: OpenApi) -> None:
    api = await open_api(Script(["Hello!"]))
    created = await api.post("/api/threads", json={"title": "native"}, headers=auth())
    thread_id = created.json()["thread_id"]
    await api.post(CHAT, json=submit(thread_id, user_message("Hello")), headers=auth())
    detail = (await api.get(f"/api/threads/{thread_id}", headers=auth())).json()
    assert [m["kind"] for m in detail["messages"]] == ["request", "response"]


async def test_ag_ui_runs_pauses_and_resumes_with_edited_arguments(open_api: OpenApi) -> None:
    api = await open_api(Script([TRANSFER, "Sent 10.00 to bob."]))
    body = {
        "threadId": "ag-1",
        "runId": "r1",
        "messages": [{"id": "u1", "role": "user", "content": "Send bob 25.50"}],
        "extraFieldOfANewerClient": True,
    }
    paused = chunks(await api.post("/api/ag-ui", json=body, headers=auth()))
    finished = paused[-1]
    assert isinstance(finished, dict)
    assert finished["type"] == "RUN_FINISHED"
    (interrupt,) = finished["outcome"]["interrupts"]  # pyright: ignore[reportIndexIssue, reportCallIssue, reportArgumentType, reportUnknownVariableType]
    resume = {
        "threadId": "ag-1",
        "runId": "r2",
        "messages": [],
        "resume": [
            {
                "interruptId": interrupt["id"],
                "status": "resolved",
                "payload": {"approved": True, "editedArgs": {"to": "bob", "amount": 10}},
            }
        ],
    }
    resumed = chunks(await api.post("/api/ag-ui", json=resume, headers=auth()))
    assert resumed[-1] == {
        "type": "RUN_FINISHED",
        "threadId": "ag-1",
        "runId": "r2",
        "result": "Sent 10.00 to bob.",
        "outcome": {"type": "success"},
    }
    (approval,) = (await api.get("/api/approvals", headers=auth())).json()["approvals"]
    assert approval["override_args"] == {"to": "bob", "amount": 10}
    assert approval["args"]["amount"] == 25.5  # the model's arguments are kept beside the edit
    # The edited call is the one that ran.
    thread = await only_thread(api)
    detail = (await api.get(f"/api/threads/{thread['thread_id']}", headers=auth())).json()
    returned = [
        p["content"] for m in detail["messages"] for p in m["parts"] if p["part_kind"] == "tool-return"
    ]
    assert returned == [{"sent": 10.0, "to": "bob"}]


async def test_native_regenerate(open_api: OpenApi) -> None:
    api = await open_api(Script([LOOKUP, "Found it.", LOOKUP, "Found it again.", TRANSFER]))
    thread_id = (await api.post("/api/threads", json={}, headers=auth())).json()["thread_id"]
    regenerate = f"/api/threads/{thread_id}/regenerate"
    assert error(await api.post(regenerate, headers=auth())) == (409, "nothing_to_regenerate")
    assert error(await api.post(regenerate, headers=auth("bob"))) == (404, "not_found")
    await api.post(CHAT, json=submit(thread_id, user_message("What is my balance?")), headers=auth())
    answer = await api.post(regenerate, headers=auth())
    assert answer.status_code == 202
    assert set(answer.json()) == {"run_id", "thread_id"}
    # The AI SDK's resume GET follows it (or, once it ended, the history holds it).
    stream = await api.get(f"{CHAT}/{thread_id}/stream", headers=auth())
    assert stream.status_code in (200, 204)
    history = (await api.get(f"{CHAT}/{thread_id}", headers=auth())).json()["messages"]
    assert [m["role"] for m in history] == ["user", "assistant"]
    assert history[1]["id"] == answer.json()["run_id"]

    await paused_call(api, thread_id)
    assert error(await api.post(regenerate, headers=auth())) == (409, "approval_pending")


# -- bad requests -------------------------------------------------------------------------------------


async def test_bad_ai_sdk_requests(open_api: OpenApi) -> None:
    # The other chat's call is another tool's: tool call ids are only unique within a thread.
    api = await open_api(Script([TRANSFER, Calls([("purge", {"what": "drafts"})])]))
    call_id = await paused_call(api, "bad")
    await api.post(CHAT, json=submit("other", user_message("Purge my drafts")), headers=auth())
    pending = (await api.get("/api/approvals?status=pending", headers=auth())).json()["approvals"]
    # A call of Alice's other chat: unknown in this one.
    (other_id,) = [a["tool_call_id"] for a in pending if a["tool_call_id"] != call_id]
    json_headers = {**auth(), "Content-Type": "application/json"}
    cases: list[tuple[object, tuple[int, str]]] = [
        (b'{"id": "bad"', (400, "invalid_json")),
        ({"messages": [user_message("hi")]}, (422, "validation_error")),
        ({"id": "bad", "messages": []}, (422, "validation_error")),
        ({"id": "", "messages": [user_message("hi")]}, (422, "validation_error")),
        ({"id": "x" * 201, "messages": [user_message("hi")]}, (422, "validation_error")),
        (
            {"id": "bad", "trigger": "delete-everything", "messages": [user_message("hi")]},
            (422, "validation_error"),
        ),
        ({"id": "bad", "messages": [{"id": "m", "role": "robot", "parts": []}]}, (422, "validation_error")),
        (submit("fresh", user_message("")), (422, "validation_error")),
        (
            {**submit("fresh", user_message("edited", "m-edit")), "messageId": "m-edit"},
            (422, "validation_error"),
        ),
        (submit("fresh", user_message("x" * 8001)), (422, "validation_error")),
        (submit("bad", responded(call_id, "true")), (422, "validation_error")),
        (
            submit("bad", {"id": "a", "role": "assistant", "parts": [{"type": "text", "text": "hi"}]}),
            (422, "validation_error"),
        ),
        (submit("bad", responded("no-such-call", True)), (404, "not_found")),
        (submit("bad", responded(other_id, True)), (404, "not_found")),
        (submit("bad", user_message("hello again", "m2")), (409, "approval_pending")),
        (
            {"id": "never-used", "trigger": "regenerate-message", "messages": [user_message("hi")]},
            (409, "nothing_to_regenerate"),
        ),
    ]
    for body, expected in cases:
        content = body if isinstance(body, bytes) else json.dumps(body).encode()
        response = await api.post(CHAT, content=content, headers=json_headers)
        assert error(response) == expected, body
    assert error(await api.post(CHAT, json=submit("bad", user_message("hi")))) == (401, "missing_token")
    assert error(await api.post(CHAT, content=b"{}", headers={**auth(), "Content-Type": "text/plain"})) == (
        415,
        "unsupported_media_type",
    )
    assert error(await api.get(f"{CHAT}/bad")) == (401, "missing_token")
    # Nothing of that changed the paused call.
    pending = (await api.get("/api/approvals?status=pending", headers=auth())).json()["approvals"]
    assert call_id in [a["tool_call_id"] for a in pending]
    # A refused first message of a new chat ("fresh") leaves no thread behind: the threads are the
    # chats "bad" and "other", and "never-used" (a regenerate's chat is made before it is refused).
    assert len((await api.get("/api/threads", headers=auth())).json()["threads"]) == 3


async def test_bad_ag_ui_requests(open_api: OpenApi) -> None:
    api = await open_api(Script([TRANSFER, "Not sent."]))
    start = {
        "threadId": "ag-bad",
        "runId": "r1",
        "messages": [{"id": "u1", "role": "user", "content": "Send bob 25.50"}],
    }
    paused = chunks(await api.post("/api/ag-ui", json=start, headers=auth()))
    interrupt_id = paused[-1]["outcome"]["interrupts"][0]["id"]  # pyright: ignore[reportIndexIssue, reportCallIssue, reportArgumentType]

    def resume(interrupt: object, payload: object, status: str = "resolved") -> dict[str, object]:
        entry = {"interruptId": interrupt, "status": status, "payload": payload}
        return {"threadId": "ag-bad", "runId": "r2", "messages": [], "resume": [entry]}

    cases: list[tuple[object, tuple[int, str]]] = [
        ({"runId": "r", "messages": []}, (422, "validation_error")),
        (
            {"threadId": "ag-bad", "runId": "r", "messages": [{"id": "x", "role": "robot", "content": "hi"}]},
            (422, "validation_error"),
        ),
        ({"threadId": "ag-idle", "runId": "r", "messages": []}, (422, "nothing_to_run")),
        # A user message, queued straight on its chat's thread: refused as the native API refuses it.
        (
            {"threadId": "x" * 201, "runId": "r", "messages": [{"id": "u", "role": "user", "content": "hi"}]},
            (422, "validation_error"),
        ),
        (
            {"threadId": "ag-new", "runId": "r", "messages": [{"id": "u", "role": "user", "content": " "}]},
            (422, "validation_error"),
        ),
        (
            {"threadId": "ag-bad", "runId": "r", "messages": [{"id": "u2", "role": "user", "content": "hi"}]},
            (409, "approval_pending"),
        ),
        (resume("not-an-interrupt", {"approved": True}), (404, "not_found")),
        (resume("int-no-such-call", {"approved": True}), (404, "not_found")),
        (resume(interrupt_id, {"approved": "yes"}), (422, "validation_error")),
        (resume(interrupt_id, None), (422, "validation_error")),
        (
            resume(interrupt_id, {"approved": True, "editedArgs": {"amount": "lots"}}),
            (422, "invalid_arguments"),
        ),
        (resume(interrupt_id, {"approved": True}, status="maybe"), (422, "validation_error")),
    ]
    for body, expected in cases:
        response = await api.post("/api/ag-ui", json=body, headers=auth())
        assert error(response) == expected, body
    bob = await api.post("/api/ag-ui", json=resume(interrupt_id, {"approved": True}), headers=auth("bob"))
    assert error(bob) == (404, "not_found")
    # The call still waits, and its owner can still decide it.
    done = chunks(
        await api.post(
            "/api/ag-ui", json=resume(interrupt_id, {"approved": False}, "cancelled"), headers=auth()
        )
    )
    assert done[-1]["outcome"] == {"type": "success"}  # pyright: ignore[reportIndexIssue, reportCallIssue, reportArgumentType]
