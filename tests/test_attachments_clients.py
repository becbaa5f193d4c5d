"""Files sent by the AI SDK (`file` parts) and AG-UI (image and document parts) as data URLs, in process."""

from __future__ import annotations

import base64
import hashlib

import httpx
import pytest
from pydantic_ai import Agent

from agent import RunScope

from .asgi import error_of
from .test_attachments import PNG, OpenApi, Seen, auth, hashing_model, open_api, scoped

pytestmark = pytest.mark.anyio

__all__ = ("open_api",)  # the fixture, used by name

HTML = b"<!DOCTYPE html><html><script>alert(1)</script></html>"


def data_url(data: bytes, media_type: str) -> str:
    return f"data:{media_type};base64,{base64.b64encode(data).decode()}"


def ai_sdk_body(chat_id: str, message_id: str, *parts: dict[str, object]) -> dict[str, object]:
    return {
        "id": chat_id,
        "trigger": "submit-message",
        "messages": [{"id": message_id, "role": "user", "parts": [{"type": "text", "text": "Look"}, *parts]}],
    }


async def the_thread(api: httpx.AsyncClient) -> str:
    threads = (await api.get("/api/threads", headers=auth())).json()["threads"]
    assert len(threads) == 1
    return str(threads[0]["thread_id"])


async def test_an_ai_sdk_file_part_is_stored_given_to_the_model_and_answered_by_url(
    open_api: OpenApi,
) -> None:
    seen = Seen()
    api = await open_api(scoped(Agent(hashing_model(seen), deps_type=RunScope)))
    part = {
        "type": "file",
        "mediaType": "image/png",
        "filename": "photo.png",
        "url": data_url(PNG, "image/png"),
    }
    answer = await api.post("/api/ai-sdk/chat", json=ai_sdk_body("chat-1", "m1", part), headers=auth())
    assert answer.status_code == 200, answer.text
    assert seen.requests == [["Look", f"image/png {hashlib.sha256(PNG).hexdigest()}"]]
    thread_id = await the_thread(api)
    files = (await api.get(f"/api/threads/{thread_id}/files", headers=auth())).json()["files"]
    assert [(f["name"], f["media_type"], f["size"]) for f in files] == [("photo.png", "image/png", len(PNG))]
    history = (await api.get("/api/ai-sdk/chat/chat-1", headers=auth())).json()["messages"]
    url = f"/api/threads/{thread_id}/files/{files[0]['file_id']}"
    assert history[0] == {
        "id": "m1",
        "role": "user",
        "parts": [
            {"type": "text", "text": "Look", "state": "done"},
            {"type": "file", "mediaType": "image/png", "filename": "photo.png", "url": url},
        ],
    }
    downloaded = await api.get(url, headers=auth())
    assert (downloaded.status_code, downloaded.content) == (200, PNG)
    # The history's part sent back attaches the same file again, by its endpoint.
    again = {"type": "file", "mediaType": "image/png", "filename": "photo.png", "url": url}
    answer = await api.post("/api/ai-sdk/chat", json=ai_sdk_body("chat-1", "m2", again), headers=auth())
    assert answer.status_code == 200, answer.text
    files = (await api.get(f"/api/threads/{thread_id}/files", headers=auth())).json()["files"]
    assert len(files) == 1


async def test_an_ai_sdk_file_part_is_checked_as_an_upload_is(open_api: OpenApi) -> None:
    api = await open_api(scoped(Agent(hashing_model(Seen()), deps_type=RunScope)))
    cases = [
        (
            {"type": "file", "mediaType": "image/png", "url": data_url(HTML, "image/png")},
            415,
            "unsupported_media_type",
        ),
        (
            {"type": "file", "mediaType": "image/png", "url": "data:image/png;base64,@@@"},
            422,
            "validation_error",
        ),
        ({"type": "file", "mediaType": "image/png", "url": "https://example.com/x.png"}, 404, "not_found"),
        (
            {"type": "file", "mediaType": "image/png", "url": "data:image/png;base64,"},
            415,
            "unsupported_media_type",
        ),
    ]
    for index, (part, status, code) in enumerate(cases):
        answer = await api.post(
            "/api/ai-sdk/chat", json=ai_sdk_body("chat-2", f"m{index}", part), headers=auth()
        )
        assert error_of(status, answer.content) == (status, code), answer.text
    thread_id = await the_thread(api)
    assert (await api.get(f"/api/threads/{thread_id}/files", headers=auth())).json()["files"] == []


async def test_an_ag_ui_document_part_is_given_to_the_model(open_api: OpenApi) -> None:
    seen = Seen()
    api = await open_api(scoped(Agent(hashing_model(seen), deps_type=RunScope)))
    csv = b"order,amount\nA-1,24.95\n"
    body = {
        "threadId": "chat-3",
        "runId": "r1",
        "state": None,
        "tools": [],
        "context": [],
        "forwardedProps": None,
        "messages": [
            {
                "id": "u1",
                "role": "user",
                "content": [
                    {"type": "text", "text": "Sum it"},
                    {
                        "type": "document",
                        "source": {
                            "type": "data",
                            "value": base64.b64encode(csv).decode(),
                            "mimeType": "text/csv",
                        },
                        "metadata": {"filename": "orders.csv"},
                    },
                ],
            }
        ],
    }
    answer = await api.post("/api/ag-ui", json=body, headers=auth())
    assert answer.status_code == 200, answer.text
    assert seen.requests == [["Sum it", "[file: orders.csv]\n" + csv.decode()]]
    thread_id = await the_thread(api)
    files = (await api.get(f"/api/threads/{thread_id}/files", headers=auth())).json()["files"]
    assert [(f["name"], f["media_type"]) for f in files] == [("orders.csv", "text/csv")]
