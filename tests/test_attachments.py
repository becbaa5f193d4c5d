"""Files attached to messages, in process: what the model receives, what the store keeps, scoping, removal, tools.

On SQLite and PostgreSQL, with the bytes in the database.
"""

from __future__ import annotations

import hashlib
import io
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from pathlib import Path

import anyio
import httpx
import pytest
import sqlalchemy as sa
from pydantic_ai import Agent, RunContext
from pydantic_ai.messages import (
    BinaryContent,
    ModelMessage,
    ModelRequest,
    ToolCallPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, DeltaToolCalls, FunctionModel

from agent import ChatApp, RunScope, RuntimeOptions, open_runtime, queue_run, run_step
from store import Database, NewFile
from store.blobs_database import CHUNK_BYTES
from store.schema import ConversationEntryRow
from web import Settings, create_app
from web.tokens import issue_token

from .asgi import SECRET, Answer, call, error_of
from .statements import sent_statements
from .waiting import eventually

pytestmark = pytest.mark.anyio

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00\x00\x00\rIHDR" + bytes(range(200))
PDF_HEAD = b"%PDF-1.7\n"
CSV = b"order,amount\nA-1,24.95\nA-2,3.50\n"
Json = dict[str, object]


def auth(user: str = "ann") -> dict[str, str]:
    return {"Authorization": f"Bearer {issue_token(SECRET, user)}"}


@dataclass
class Seen:
    """What the model received in each request's user prompts: a sha256 per file, and the texts."""

    requests: list[list[str]] = field(default_factory=list[list[str]])


def hashing_model(seen: Seen, *, tool: str | None = None) -> FunctionModel:
    """A model that notes what its user prompts hold (bytes as their sha256) and answers "ok"."""

    async def answer(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str | DeltaToolCalls]:
        if tool is not None and not any(
            isinstance(part, ToolCallPart) for message in messages for part in getattr(message, "parts", [])
        ):
            yield {0: DeltaToolCall(name=tool, json_args="{}", tool_call_id="call-1")}
            return
        seen.requests.append(_prompted(messages))
        yield "ok"

    return FunctionModel(stream_function=answer)


def _prompted(messages: list[ModelMessage]) -> list[str]:
    got: list[str] = []
    for message in messages:
        if not isinstance(message, ModelRequest):
            continue
        for part in message.parts:
            if isinstance(part, UserPromptPart) and not isinstance(part.content, str):
                for item in part.content:
                    if isinstance(item, BinaryContent):
                        got.append(f"{item.media_type} {hashlib.sha256(item.data).hexdigest()}")
                    elif isinstance(item, str):
                        got.append(item)
                    else:
                        got.append(f"unresolved {type(item).__name__}")
    return got


OpenApi = Callable[[ChatApp[RunScope]], Awaitable[httpx.AsyncClient]]


@pytest.fixture
async def open_api(database_url: str, tmp_path: Path) -> AsyncIterator[OpenApi]:
    async with AsyncExitStack() as stack:

        async def open_one(chat_app: ChatApp[RunScope]) -> httpx.AsyncClient:
            settings = Settings(database_url=database_url, secret=SECRET, data_dir=tmp_path)
            app = create_app(settings, app=chat_app)
            await stack.enter_async_context(app.router.lifespan_context(app))
            client = httpx.AsyncClient(
                transport=httpx.ASGITransport(app=app), base_url="http://test", timeout=30
            )
            return await stack.enter_async_context(client)

        yield open_one


def scoped(agent: Agent[RunScope, str]) -> ChatApp[RunScope]:
    return ChatApp(agent=agent, deps=lambda scope: scope)


async def new_thread(api: httpx.AsyncClient, user: str = "ann") -> str:
    answer = await api.post("/api/threads", json={}, headers=auth(user))
    assert answer.status_code == 201, answer.text
    return str(answer.json()["thread_id"])


async def upload(api: httpx.AsyncClient, thread_id: str, name: str, data: bytes, media_type: str) -> str:
    answer = await api.post(
        f"/api/threads/{thread_id}/files", files={"file": (name, data, media_type)}, headers=auth()
    )
    assert answer.status_code == 201, answer.text
    return str(answer.json()["file_id"])


async def send(api: httpx.AsyncClient, thread_id: str, content: str, files: list[str] | None = None) -> None:
    body: Json = {"content": content} if files is None else {"content": content, "files": files}
    answer = await api.post(f"/api/threads/{thread_id}/messages", json=body, headers=auth())
    assert answer.status_code == 202, answer.text


async def until_idle(api: httpx.AsyncClient, thread_id: str, replies: int) -> Json:
    """The thread once it has `replies` replies and no run."""

    async def idle() -> Json | None:
        detail: Json = (await api.get(f"/api/threads/{thread_id}", headers=auth())).json()
        messages = detail["messages"]
        assert isinstance(messages, list)
        ended = sum(1 for m in messages if isinstance(m, dict) and m.get("kind") == "response")
        return detail if detail["status"] == "idle" and ended >= replies else None

    return await eventually(idle)


async def test_the_model_receives_exactly_the_uploaded_bytes_on_every_turn(open_api: OpenApi) -> None:
    seen = Seen()
    api = await open_api(scoped(Agent(hashing_model(seen), deps_type=RunScope)))
    thread_id = await new_thread(api)
    pdf = PDF_HEAD + bytes(range(256)) * 40
    png_id = await upload(api, thread_id, "photo.png", PNG, "image/png")
    pdf_id = await upload(api, thread_id, "invoice.pdf", pdf, "application/pdf")
    csv_id = await upload(api, thread_id, "orders.csv", CSV, "text/csv")
    await send(api, thread_id, "What is wrong here?", [png_id, pdf_id, csv_id])
    await until_idle(api, thread_id, 1)
    await send(api, thread_id, "And now?")
    detail = await until_idle(api, thread_id, 2)
    sent = [
        "What is wrong here?",
        f"image/png {hashlib.sha256(PNG).hexdigest()}",
        f"application/pdf {hashlib.sha256(pdf).hexdigest()}",
        "[file: orders.csv]\n" + CSV.decode(),
    ]
    assert seen.requests == [sent, sent]
    assert detail["attachments"] == [
        {
            "file_id": png_id,
            "name": "photo.png",
            "media_type": "image/png",
            "size": len(PNG),
            "removed": False,
            "url": f"/api/threads/{thread_id}/files/{png_id}",
        },
        {
            "file_id": pdf_id,
            "name": "invoice.pdf",
            "media_type": "application/pdf",
            "size": len(pdf),
            "removed": False,
            "url": f"/api/threads/{thread_id}/files/{pdf_id}",
        },
        {
            "file_id": csv_id,
            "name": "orders.csv",
            "media_type": "text/csv",
            "size": len(CSV),
            "removed": False,
            "url": f"/api/threads/{thread_id}/files/{csv_id}",
        },
    ]
    messages = detail["messages"]
    assert isinstance(messages, list)
    prompt = messages[0]["parts"][-1]
    assert prompt["part_kind"] == "user-prompt"
    assert [item["attachment"]["file_id"] for item in prompt["content"][1:]] == [png_id, pdf_id, csv_id]
    assert [item["url"] for item in prompt["content"][1:]] == [
        f"durable-chat-file://{file_id}" for file_id in (png_id, pdf_id, csv_id)
    ]


async def test_a_checkpoint_holds_a_reference_not_the_bytes(open_api: OpenApi, database_url: str) -> None:
    seen = Seen()
    api = await open_api(scoped(Agent(hashing_model(seen), deps_type=RunScope)))
    thread_id = await new_thread(api)
    pdf = PDF_HEAD + b"0" * (2 * 1024 * 1024)
    pdf_id = await upload(api, thread_id, "invoice.pdf", pdf, "application/pdf")
    await send(api, thread_id, "Read this", [pdf_id])
    await until_idle(api, thread_id, 1)
    assert seen.requests == [["Read this", f"application/pdf {hashlib.sha256(pdf).hexdigest()}"]]
    engine = create_engine_for(database_url)
    try:
        async with engine.connect() as connection:
            sizes = (
                (await connection.execute(sa.select(sa.func.length(ConversationEntryRow.message))))
                .scalars()
                .all()
            )
    finally:
        await engine.dispose()
    # The request (prompt and reference) and the reply: a few hundred bytes each, not 2 MB.
    assert len(sizes) == 2
    assert max(sizes) < 1024, sizes


def create_engine_for(database_url: str) -> sa.ext.asyncio.AsyncEngine:
    from sqlalchemy.ext.asyncio import create_async_engine

    return create_async_engine(database_url)


async def test_another_threads_or_users_file_is_a_404_and_queues_nothing(open_api: OpenApi) -> None:
    seen = Seen()
    api = await open_api(scoped(Agent(hashing_model(seen), deps_type=RunScope)))
    mine, other = await new_thread(api), await new_thread(api)
    theirs = await new_thread(api, "bob")
    other_file = await upload(api, other, "orders.csv", CSV, "text/csv")
    answer = await api.post(
        f"/api/threads/{theirs}/files", files={"file": ("b.csv", CSV, "text/csv")}, headers=auth("bob")
    )
    assert answer.status_code == 201
    bobs_file = answer.json()["file_id"]
    for file_id in (other_file, bobs_file, "no-such-file"):
        answer = await api.post(
            f"/api/threads/{mine}/messages", json={"content": "hi", "files": [file_id]}, headers=auth()
        )
        assert error_of(404, answer.content) == (404, "not_found")
        assert answer.json()["error"]["message"] == f"no file {file_id!r}"
    # Bob cannot attach his file to Ann's thread, nor Ann's to his.
    answer = await api.post(
        f"/api/threads/{mine}/messages", json={"content": "hi", "files": [bobs_file]}, headers=auth("bob")
    )
    assert error_of(404, answer.content) == (404, "not_found")
    detail = (await api.get(f"/api/threads/{mine}", headers=auth())).json()
    assert (detail["status"], detail["messages"]) == ("idle", [])
    assert seen.requests == []


async def test_a_message_names_files_as_a_list_of_ids(open_api: OpenApi) -> None:
    api = await open_api(scoped(Agent(hashing_model(Seen()), deps_type=RunScope)))
    thread_id = await new_thread(api)
    for files in ("abc", [1], ["a"] * 21):
        answer = await api.post(
            f"/api/threads/{thread_id}/messages", json={"content": "hi", "files": files}, headers=auth()
        )
        assert error_of(422, answer.content) == (422, "validation_error")


async def test_a_deleted_file_reaches_the_model_as_a_placeholder(open_api: OpenApi) -> None:
    seen = Seen()
    api = await open_api(scoped(Agent(hashing_model(seen), deps_type=RunScope)))
    thread_id = await new_thread(api)
    pdf = PDF_HEAD + b"1" * 1000
    pdf_id = await upload(api, thread_id, "invoice.pdf", pdf, "application/pdf")
    await send(api, thread_id, "Read this", [pdf_id])
    await until_idle(api, thread_id, 1)
    deleted = await api.delete(f"/api/threads/{thread_id}/files/{pdf_id}", headers=auth())
    assert deleted.status_code == 204
    await send(api, thread_id, "Again")
    detail = await until_idle(api, thread_id, 2)
    assert seen.requests[1] == ["Read this", "[file removed: invoice.pdf]"]
    attachments = detail["attachments"]
    assert isinstance(attachments, list)
    assert [(a["name"], a["removed"]) for a in attachments] == [("invoice.pdf", True)]


async def test_tools_list_read_and_save_the_threads_files(open_api: OpenApi) -> None:
    agent = Agent(hashing_model(Seen(), tool="summarise"), deps_type=RunScope)
    summaries: list[str] = []

    @agent.tool
    async def summarise(ctx: RunContext[RunScope]) -> str:  # pyright: ignore[reportUnusedFunction]
        files = await ctx.deps.files.list()
        text = (await ctx.deps.files.read(files[0])).decode()
        summaries.append(f"{[f.name for f in files]} {text.count(chr(10))} lines")
        report = await ctx.deps.files.save("report.md", b"# Orders\n2 orders\n", media_type="text/markdown")
        return report.file_id

    api = await open_api(scoped(agent))
    thread_id = await new_thread(api)
    csv_id = await upload(api, thread_id, "orders.csv", CSV, "text/csv")
    await send(api, thread_id, "Summarise", [csv_id])
    await until_idle(api, thread_id, 2)
    assert summaries == ["['orders.csv'] 3 lines"]
    listed = (await api.get(f"/api/threads/{thread_id}/files", headers=auth())).json()["files"]
    assert [(f["name"], f["media_type"]) for f in listed] == [
        ("orders.csv", "text/csv"),
        ("report.md", "text/markdown"),
    ]
    report = await api.get(f"/api/threads/{thread_id}/files/{listed[1]['file_id']}", headers=auth())
    assert (report.status_code, report.content) == (200, b"# Orders\n2 orders\n")


async def test_a_regenerated_reply_gets_the_same_files(open_api: OpenApi) -> None:
    seen = Seen()
    api = await open_api(scoped(Agent(hashing_model(seen), deps_type=RunScope)))
    thread_id = await new_thread(api)
    png_id = await upload(api, thread_id, "photo.png", PNG, "image/png")
    await send(api, thread_id, "What is this?", [png_id])
    await until_idle(api, thread_id, 1)
    answer = await api.post(f"/api/threads/{thread_id}/regenerate", headers=auth())
    assert answer.status_code == 202, answer.text

    async def regenerated() -> Json | None:  # the regenerated reply asked, and the thread idle again
        detail = await until_idle(api, thread_id, 1)
        return detail if len(seen.requests) == 2 else None

    detail = await eventually(regenerated)
    sent = ["What is this?", f"image/png {hashlib.sha256(PNG).hexdigest()}"]
    assert seen.requests == [sent, sent]
    attachments = detail["attachments"]
    assert isinstance(attachments, list)
    assert [a["file_id"] for a in attachments] == [png_id]


def _user_messages(stream: bytes) -> list[Json]:
    """The `user_message` events of an SSE answer, as JSON."""
    found: list[Json] = []
    for frame in stream.decode().split("\n\n"):
        lines = frame.splitlines()
        if "event: user_message" in lines:
            found.append(
                json.loads(
                    "".join(line.removeprefix("data: ") for line in lines if line.startswith("data: "))
                )
            )
    return found


async def test_a_follower_sees_the_attachments_the_thread_answers_afterwards(
    database_url: str, tmp_path: Path
) -> None:
    seen = Seen()
    settings = Settings(database_url=database_url, secret=SECRET, data_dir=tmp_path)
    app = create_app(settings, app=scoped(Agent(hashing_model(seen), deps_type=RunScope)))
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test", timeout=30) as api,
    ):
        thread_id = await new_thread(api)
        png_id = await upload(api, thread_id, "chart.png", PNG, "image/png")
        csv_id = await upload(api, thread_id, "orders.csv", CSV, "text/csv")
        followed, done, answers = anyio.Event(), anyio.Event(), list[Answer]()
        headers = [(b"authorization", auth()["Authorization"].encode())]

        async def follow() -> None:
            url = f"/api/threads/{thread_id}/events?after=0"
            answers.append(await call(app, "GET", url, headers=headers, started=followed, until=done))

        async with anyio.create_task_group() as tasks:
            tasks.start_soon(follow)
            await followed.wait()
            await send(api, thread_id, "Compare these", [png_id, csv_id])
            detail = await until_idle(api, thread_id, 1)
            done.set()
    [answer] = answers
    [live] = _user_messages(answer.body)
    attachments = detail["attachments"]
    assert isinstance(attachments, list)
    assert attachments
    assert all(isinstance(a, dict) for a in attachments)
    keys = ("file_id", "name", "media_type", "size")
    assert live["content"] == "Compare these"
    assert live["attachments"] == [{k: a[k] for k in keys} for a in attachments]  # pyright: ignore[reportIndexIssue, reportUnknownVariableType]
    assert [a["name"] for a in live["attachments"]] == ["chart.png", "orders.csv"]  # pyright: ignore[reportIndexIssue, reportUnknownVariableType, reportGeneralTypeIssues]


async def test_every_request_of_a_run_gets_the_files_after_plain_turns(open_api: OpenApi) -> None:
    # The resolver skips the messages it found plain earlier in the run; the one holding references
    # is resolved on each request, the tool step's included.
    seen = Seen()

    async def answer(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str | DeltaToolCalls]:
        seen.requests.append(_prompted(messages))
        last = messages[-1]
        prompts = (
            [p.content for p in last.parts if isinstance(p, UserPromptPart)]
            if isinstance(last, ModelRequest)
            else []
        )
        if any("look" in str(content) for content in prompts):
            yield {0: DeltaToolCall(name="noop", json_args="{}", tool_call_id=f"call-{len(messages)}")}
            return
        yield "ok"

    agent = Agent(FunctionModel(stream_function=answer), deps_type=RunScope)

    @agent.tool_plain
    def noop() -> str:  # pyright: ignore[reportUnusedFunction]
        return "done"

    api = await open_api(scoped(agent))
    thread_id = await new_thread(api)
    await send(api, thread_id, "Hello")
    await until_idle(api, thread_id, 1)
    csv_id = await upload(api, thread_id, "orders.csv", CSV, "text/csv")
    await send(api, thread_id, "Please look at this", [csv_id])
    await until_idle(api, thread_id, 3)
    attached = ["Please look at this", "[file: orders.csv]\n" + CSV.decode()]
    assert seen.requests == [[], attached, attached]


@pytest.mark.parametrize(
    ("stored_by", "claimed_at_queueing"), [("this process", True), ("another process", False)]
)
async def test_a_turn_reads_its_files_rows_once_and_their_bytes_in_one_statement(
    database_url: str, stored_by: str, claimed_at_queueing: bool
) -> None:
    # The queueing that claims the run hands the step the file rows it read; a run claimed later
    # reads them in one query. The resolver asks for nothing more; the bytes another process stored
    # are read in one statement for all the files, not one a piece; the run's second request
    # reuses what its first resolved.
    seen = Seen()
    agent = Agent(hashing_model(seen, tool="noop"), deps_type=RunScope)

    @agent.tool_plain
    def noop() -> str:  # pyright: ignore[reportUnusedFunction]
        return "done"

    pdfs = [PDF_HEAD + bytes([n]) * (2 * CHUNK_BYTES) for n in range(3)]
    options = RuntimeOptions(messages_per_minute=None)
    async with open_runtime(scoped(agent), database_url, options=options) as runtime:
        uploader = runtime.db if stored_by == "this process" else await Database.connect(database_url)
        try:
            thread = await runtime.db.threads.create(user_id="ann")
            file_ids: list[str] = []
            for number, data in enumerate(pdfs):
                new = NewFile(
                    thread_id=thread.thread_id,
                    user_id="ann",
                    name=f"invoice-{number}.pdf",
                    media_type="application/pdf",
                    source=io.BytesIO(data),
                    size=len(data),
                    sha256=hashlib.sha256(data).hexdigest(),
                )
                file_ids.append((await uploader.files.save(new)).file_id)
        finally:
            if uploader is not runtime.db:
                await uploader.aclose()
        opened = await queue_run(
            runtime,
            thread.thread_id,
            "message",
            content="Read these",
            claim=claimed_at_queueing,
            file_ids=file_ids,
        )
        with sent_statements(runtime.db.engine) as sent:
            status = await run_step(runtime, opened.run.run_id, claimed=opened.claimed, span=opened.span)
    assert status == "completed"
    sent_bytes = [f"application/pdf {hashlib.sha256(data).hexdigest()}" for data in pdfs]
    assert seen.requests == [["Read these", *sent_bytes]]  # the answering request (the first calls the tool)
    assert len([sql for sql in sent if "FROM files" in sql]) == (0 if claimed_at_queueing else 1)
    chunk_reads = [sql for sql in sent if "FROM file_chunks" in sql]
    assert len(chunk_reads) == (0 if stored_by == "this process" else 1)
