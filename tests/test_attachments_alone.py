"""A message of files and no text (a photo alone), on every client; retried posts store their files once."""

from __future__ import annotations

import base64
import hashlib
import json

import pytest
from pydantic_ai import Agent

from agent import RunScope

from .asgi import error_of
from .test_attachments import (
    PNG,
    OpenApi,
    Seen,
    auth,
    hashing_model,
    new_thread,
    open_api,
    scoped,
    until_idle,
    upload,
)
from .test_attachments_clients import data_url, the_thread

pytestmark = pytest.mark.anyio

__all__ = ("open_api",)  # the fixture, used by name

PNG_SEEN = f"image/png {hashlib.sha256(PNG).hexdigest()}"
EMPTY = {
    "error": {
        "code": "validation_error",
        "message": "the message has no text and no files",
        "details": [{"loc": "content", "msg": "text or files required", "type": "missing"}],
    }
}


def ai_sdk(chat_id: str, message_id: str, parts: list[dict[str, object]]) -> dict[str, object]:
    return {
        "id": chat_id,
        "trigger": "submit-message",
        "messages": [{"id": message_id, "role": "user", "parts": parts}],
    }


def ag_ui(thread_id: str, message_id: str, content: object) -> dict[str, object]:
    return {
        "threadId": thread_id,
        "runId": "r1",
        "state": None,
        "tools": [],
        "context": [],
        "forwardedProps": None,
        "messages": [{"id": message_id, "role": "user", "content": content}],
    }


PNG_PART = {
    "type": "file",
    "mediaType": "image/png",
    "filename": "photo.png",
    "url": data_url(PNG, "image/png"),
}
PNG_IMAGE = {
    "type": "image",
    "source": {"type": "data", "value": base64.b64encode(PNG).decode(), "mimeType": "image/png"},
    "metadata": {"filename": "photo.png"},
}


def _data_payloads(stream: str) -> list[dict[str, object]]:
    payloads: list[dict[str, object]] = []
    for line in stream.splitlines():
        if line.startswith("data: {"):
            payloads.append(json.loads(line.removeprefix("data: ")))
    return payloads


async def test_a_photo_alone_is_a_message_of_the_native_api(open_api: OpenApi) -> None:
    seen = Seen()
    api = await open_api(scoped(Agent(hashing_model(seen), deps_type=RunScope)))
    thread_id = await new_thread(api)
    messages = f"/api/threads/{thread_id}/messages"
    for body in ({}, {"content": ""}, {"content": "", "files": []}):
        refused = await api.post(messages, json=body, headers=auth())
        assert error_of(refused.status_code, refused.content) == (422, "validation_error")
        assert refused.json() == EMPTY
    file_id = await upload(api, thread_id, "photo.png", PNG, "image/png")
    answer = await api.post(messages, json={"files": [file_id]}, headers=auth())
    assert answer.status_code == 202, answer.text
    detail = await until_idle(api, thread_id, 1)
    assert seen.requests == [[PNG_SEEN]]  # the image, and no empty text
    assert detail["title"] == ""
    assert [(a["file_id"], a["name"]) for a in detail["attachments"]] == [(file_id, "photo.png")]  # type: ignore[union-attr]


async def test_a_photo_alone_through_the_ai_sdk_and_a_retry_stores_it_once(open_api: OpenApi) -> None:
    seen = Seen()
    api = await open_api(scoped(Agent(hashing_model(seen), deps_type=RunScope)))
    refused = await api.post(
        "/api/ai-sdk/chat", json=ai_sdk("chat-1", "m0", [{"type": "text", "text": ""}]), headers=auth()
    )
    assert (refused.status_code, refused.json()) == (422, EMPTY)
    body = ai_sdk("chat-1", "m1", [PNG_PART])
    first = await api.post("/api/ai-sdk/chat", json=body, headers=auth())
    assert first.status_code == 200, first.text
    thread_id = await the_thread(api)
    files = (await api.get(f"/api/threads/{thread_id}/files", headers=auth())).json()["files"]
    assert len(files) == 1
    told = [p for p in _data_payloads(first.text) if p["type"] == "data-user-files"]
    url = f"/api/threads/{thread_id}/files/{files[0]['file_id']}"
    assert told == [
        {
            "type": "data-user-files",
            "data": {
                "files": [
                    {
                        "fileId": files[0]["file_id"],
                        "filename": "photo.png",
                        "mediaType": "image/png",
                        "size": len(PNG),
                        "url": url,
                    }
                ]
            },
            "transient": True,
        }
    ]
    # useChat's retry sends the same message again: the same run, the same file, listed once.
    again = await api.post("/api/ai-sdk/chat", json=body, headers=auth())
    assert again.status_code == 200, again.text
    assert (await api.get(f"/api/threads/{thread_id}/files", headers=auth())).json()["files"] == files
    assert seen.requests == [[PNG_SEEN]]
    history = (await api.get("/api/ai-sdk/chat/chat-1", headers=auth())).json()["messages"]
    assert [m["role"] for m in history] == ["user", "assistant"]
    assert history[0]["parts"][-1] == {
        "type": "file",
        "mediaType": "image/png",
        "filename": "photo.png",
        "url": url,
    }


async def test_a_photo_alone_through_ag_ui_and_a_retry_stores_it_once(open_api: OpenApi) -> None:
    seen = Seen()
    api = await open_api(scoped(Agent(hashing_model(seen), deps_type=RunScope)))
    refused = await api.post("/api/ag-ui", json=ag_ui("chat-2", "u0", ""), headers=auth())
    assert (refused.status_code, refused.json()) == (422, EMPTY)
    refused = await api.post(
        "/api/ag-ui", json=ag_ui("chat-2", "u0", [{"type": "text", "text": " "}]), headers=auth()
    )
    assert (refused.status_code, refused.json()) == (422, EMPTY)
    body = ag_ui("chat-2", "u1", [PNG_IMAGE])
    first = await api.post("/api/ag-ui", json=body, headers=auth())
    assert first.status_code == 200, first.text
    thread_id = await the_thread(api)
    files = (await api.get(f"/api/threads/{thread_id}/files", headers=auth())).json()["files"]
    assert [(f["name"], f["media_type"]) for f in files] == [("photo.png", "image/png")]
    custom = [p for p in _data_payloads(first.text) if p["type"] == "CUSTOM" and p["name"] == "user_files"]
    url = f"/api/threads/{thread_id}/files/{files[0]['file_id']}"
    assert [f["url"] for f in custom[0]["value"]["files"]] == [url]  # type: ignore[index]
    again = await api.post("/api/ag-ui", json=body, headers=auth())
    assert again.status_code == 200, again.text
    assert (await api.get(f"/api/threads/{thread_id}/files", headers=auth())).json()["files"] == files
    assert seen.requests == [[PNG_SEEN]]


async def test_the_same_bytes_under_another_name_are_another_file(open_api: OpenApi) -> None:
    api = await open_api(scoped(Agent(hashing_model(Seen()), deps_type=RunScope)))
    renamed = {**PNG_PART, "filename": "copy.png"}
    answer = await api.post(
        "/api/ai-sdk/chat", json=ai_sdk("chat-3", "m1", [PNG_PART, PNG_PART, renamed]), headers=auth()
    )
    assert answer.status_code == 200, answer.text
    thread_id = await the_thread(api)
    files = (await api.get(f"/api/threads/{thread_id}/files", headers=auth())).json()["files"]
    assert sorted(f["name"] for f in files) == ["copy.png", "photo.png"]
