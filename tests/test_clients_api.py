"""The AI SDK, AG-UI and regenerate endpoints in process: flows over the durable machinery, and every bad request.

The app runs with its lifespan (database, runner, broker) under httpx's ASGI transport; a stream
answer is read whole, since each one ends when its run does.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from agent.demo import shop_app
from web.app import create_app
from web.settings import Settings
from web.tokens import issue_token

pytestmark = pytest.mark.anyio

SECRET = "clients-api-secret"
CHAT = "/api/ai-sdk/chat"


@pytest.fixture
async def api(database_url: str, tmp_path: Path) -> AsyncIterator[httpx.AsyncClient]:
    settings = Settings(database_url=database_url, model="demo", secret=SECRET, data_dir=tmp_path)
    app = create_app(settings, app=shop_app(delay=0))
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test", timeout=30) as client:
            yield client


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


async def paused_call(api: httpx.AsyncClient, chat_id: str, text: str = "Please refund ORD-5678") -> str:
    response = await api.post(CHAT, json=submit(chat_id, user_message(text)), headers=auth())
    requests = [c for c in chunks(response) if isinstance(c, dict) and c["type"] == "tool-approval-request"]
    assert len(requests) == 1, response.text
    (request,) = requests
    return str(request["toolCallId"])


async def only_thread(api: httpx.AsyncClient, user: str = "alice") -> dict[str, object]:
    (thread,) = (await api.get("/api/threads", headers=auth(user))).json()["threads"]
    return thread


# -- flows --------------------------------------------------------------------------------------------


async def test_an_approval_from_the_ai_sdk_is_the_native_decision(api: httpx.AsyncClient) -> None:
    call_id = await paused_call(api, "chat-a")
    thread = await only_thread(api)
    assert thread["status"] == "awaiting_approval"

    answer = await api.post(
        CHAT, json=submit("chat-a", user_message("x"), responded(call_id, True)), headers=auth()
    )
    assert answer.headers["x-vercel-ai-ui-message-stream"] == "v1"
    assert types(answer) == [
        "start",
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
    assert [m["kind"] for m in after["messages"]].count("response") == 3  # lookup, refund, the reply


async def test_a_message_id_is_the_idempotency_key_and_the_history_keeps_it(api: httpx.AsyncClient) -> None:
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


async def test_chat_ids_are_scoped_to_their_user(api: httpx.AsyncClient) -> None:
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


async def test_a_native_thread_is_a_chat_by_its_own_id(api: httpx.AsyncClient) -> None:
    created = await api.post("/api/threads", json={"title": "native"}, headers=auth())
    thread_id = created.json()["thread_id"]
    await api.post(CHAT, json=submit(thread_id, user_message("Hello")), headers=auth())
    detail = (await api.get(f"/api/threads/{thread_id}", headers=auth())).json()
    assert [m["kind"] for m in detail["messages"]] == ["request", "response"]


async def test_ag_ui_runs_pauses_and_resumes_with_edited_arguments(api: httpx.AsyncClient) -> None:
    body = {
        "threadId": "ag-1",
        "runId": "r1",
        "messages": [{"id": "u1", "role": "user", "content": "Please refund ORD-9012"}],
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
                "payload": {
                    "approved": True,
                    "editedArgs": {"order_id": "ORD-9012", "amount": 10, "reason": "r"},
                },
            }
        ],
    }
    resumed = chunks(await api.post("/api/ag-ui", json=resume, headers=auth()))
    assert resumed[-1] == {
        "type": "RUN_FINISHED",
        "threadId": "ag-1",
        "runId": "r2",
        "result": "Refunded $10.00 for ORD-9012.",
        "outcome": {"type": "success"},
    }
    (approval,) = (await api.get("/api/approvals", headers=auth())).json()["approvals"]
    assert approval["override_args"] == {"order_id": "ORD-9012", "amount": 10, "reason": "r"}
    assert approval["args"]["amount"] == 149.99  # the model's arguments are kept beside the edit


async def test_native_regenerate(api: httpx.AsyncClient) -> None:
    thread_id = (await api.post("/api/threads", json={}, headers=auth())).json()["thread_id"]
    regenerate = f"/api/threads/{thread_id}/regenerate"
    assert error(await api.post(regenerate, headers=auth())) == (409, "nothing_to_regenerate")
    assert error(await api.post(regenerate, headers=auth("bob"))) == (404, "not_found")
    await api.post(CHAT, json=submit(thread_id, user_message("Where is ORD-3456?")), headers=auth())
    answer = await api.post(regenerate, headers=auth())
    assert answer.status_code == 202
    assert set(answer.json()) == {"run_id", "thread_id"}
    # The AI SDK's resume GET follows it (or, once it ended, the history holds it).
    stream = await api.get(f"{CHAT}/{thread_id}/stream", headers=auth())
    assert stream.status_code in (200, 204)
    history = (await api.get(f"{CHAT}/{thread_id}", headers=auth())).json()["messages"]
    assert [m["role"] for m in history] == ["user", "assistant"]
    assert history[1]["id"] == answer.json()["run_id"]

    await paused_call(api, thread_id, "Please cancel ORD-3456")
    assert error(await api.post(regenerate, headers=auth())) == (409, "approval_pending")


# -- bad requests -------------------------------------------------------------------------------------


async def test_bad_ai_sdk_requests(api: httpx.AsyncClient) -> None:
    call_id = await paused_call(api, "bad")
    await api.post(CHAT, json=submit("other", user_message("Please cancel ORD-9012")), headers=auth())
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


async def test_bad_ag_ui_requests(api: httpx.AsyncClient) -> None:
    start = {
        "threadId": "ag-bad",
        "runId": "r1",
        "messages": [{"id": "u1", "role": "user", "content": "Please refund ORD-5678"}],
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
