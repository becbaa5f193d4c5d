"""`docs/your-agent.md` is true: its snippets, put together as the page says, make an app that works.

The page's Python blocks become a user's project (`helpdesk.py` and its migrations); a stand-in for
the company directory's HTTP API runs beside it; the model is scripted. Then each promise of the
page is checked: the approval pause, the record, the external effect made once with its idempotency
key, the effect in a table of the app's own, the conditional approval, the setup hook's migrations,
the reviewer's context, the ASGI app, and `durable-chat serve --app helpdesk:app`.
"""

from __future__ import annotations

import json
import re
import sys
import threading
from collections.abc import Iterator
from contextlib import AsyncExitStack
from dataclasses import dataclass, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy as sa
from starlette.testclient import TestClient

from agent import ApprovalReview, ChatApp, Runtime, decide, load_app, open_runtime, run_step
from store import NewRun, Thread, idempotency_key
from stream import CollectingSink

from .live_server import REPO_ROOT, LiveServer, auth, sqlite_url
from .scripted import Calls, Script, lines

pytestmark = pytest.mark.anyio

PAGE = REPO_ROOT / "docs" / "your-agent.md"
REVISION = '''\
"""helpdesk licences"""
import sqlalchemy as sa
from starlette.testclient import TestClient
from alembic import op

revision = "helpdesk_0001"
down_revision = None


def upgrade() -> None:
    op.create_table(
        "helpdesk_licences",
        sa.Column("username", sa.String(64), primary_key=True),
        sa.Column("product", sa.String(64), nullable=False),
    )
'''


def python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", PAGE.read_text(), flags=re.DOTALL)


def test_the_helpdesk_takes_at_most_about_forty_lines_of_the_users_code() -> None:
    [helpdesk, *_] = python_blocks()
    code = [
        line for line in helpdesk.splitlines() if line.strip() and not line.lstrip().startswith(("#", '"""'))
    ]
    assert len(code) <= 40, len(code)


@dataclass(frozen=True)
class Directory:
    url: str
    calls: list[tuple[str, str]]
    """`(username, idempotency key)` of every call."""


@pytest.fixture(scope="module")
def directory() -> Iterator[Directory]:
    """A stand-in for the company directory's HTTP API."""
    calls: list[tuple[str, str]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            username = self.path.split("/")[2]
            calls.append((username, self.headers["Idempotency-Key"]))
            body = json.dumps({"reset": username, "link": "sent"}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield Directory(f"http://127.0.0.1:{server.server_address[1]}", calls)
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The page's snippets as a user's project: the module, in order, and the migrations folder."""
    folder = tmp_path_factory.mktemp("helpdesk")
    blocks = python_blocks()
    [env] = [block for block in blocks if block.startswith("# migrations/env.py")]
    (folder / "helpdesk.py").write_text("\n\n".join(block for block in blocks if block is not env))
    (folder / "migrations" / "versions").mkdir(parents=True)
    (folder / "migrations" / "env.py").write_text(env)
    (folder / "migrations" / "versions" / "helpdesk_0001.py").write_text(REVISION)
    return folder


@pytest.fixture
def helpdesk(project: Path, directory: Directory, monkeypatch: pytest.MonkeyPatch) -> Iterator[ChatApp[Any]]:
    monkeypatch.setenv("DIRECTORY_URL", directory.url)
    monkeypatch.chdir(project)
    before = set(sys.modules)
    app = load_app("helpdesk:app")
    yield app
    # Forget the user's modules, not ours it imported on first use: a package keeps those it handed out.
    for name in set(sys.modules) - before:
        if str(getattr(sys.modules[name], "__file__", None) or "").startswith(str(project)):
            del sys.modules[name]
    sys.path.remove(str(project))


async def run(runtime: Runtime, run_id: str | None) -> list[str]:
    assert run_id is not None
    sink = CollectingSink()
    await run_step(runtime, run_id, sink=sink)
    return lines(sink.events)


async def send(runtime: Runtime, thread: Thread, content: str) -> list[str]:
    queued = (
        await runtime.db.runs.queue(NewRun(thread_id=thread.thread_id, kind="message", content=content))
    ).run
    return await run(runtime, queued.run_id)


async def approve(runtime: Runtime, thread: Thread, **override_args: object) -> list[str]:
    [pending] = await runtime.db.approvals.list(thread_id=thread.thread_id, status="pending")
    decision = await decide(
        runtime.db,
        thread.thread_id,
        pending.tool_call_id,
        decision="approved",
        decided_by="it-admin",
        override_args=override_args or None,
    )
    return await run(runtime, decision.resume_run_id)


async def test_the_helpdesk_of_the_page_works_as_the_page_says(
    helpdesk: ChatApp[Any], project: Path, directory: Directory
) -> None:
    script = Script(
        [
            Calls([("reset_password", {"username": "ada"})]),
            "Done: a reset link is on its way.",
            Calls([("open_ticket", {"summary": "VPN drops", "priority": "high"})]),
            "Ticket opened.",
            Calls([("assign_licence", {"username": "ada", "product": "IDE"})]),
            "Assigned.",
            Calls([("grant_admin", {"username": "ada", "hours": 48})]),
            "Granted.",
        ]
    )
    async with AsyncExitStack() as stack:
        runtime = await stack.enter_async_context(open_runtime(helpdesk, sqlite_url(project)))
        runtime = replace(runtime, model=script.model())
        thread = await runtime.db.threads.create(user_id="ada", title="help")

        paused = await send(runtime, thread, "I forgot my password")
        assert paused[-2:] == [
            "helpdesk: approval_required [reset_password {'username': 'ada'}]",
            "helpdesk: run_finished awaiting_approval",
        ]
        [pending] = await runtime.db.approvals.list(thread_id=thread.thread_id, status="pending")
        review = ApprovalReview(
            thread_id=thread.thread_id,
            user_id="ada",
            tool_call_id=pending.tool_call_id,
            tool_name=pending.tool_name,
            args=pending.args,
            engine=runtime.db.engine,
        )
        assert await helpdesk.context_for(review) == {"User": "ada", "Asked by": "ada"}
        done = await approve(runtime, thread)
        assert done[1] == "helpdesk: tool_result reset_password success {'reset': 'ada', 'link': 'sent'}"
        # Called once, with the call's idempotency key.
        assert directory.calls == [("ada", idempotency_key(thread.thread_id, pending.tool_call_id))]

        await send(runtime, thread, "The VPN keeps dropping")
        [record] = await runtime.db.records.list(thread.thread_id)
        assert (record.kind, record.data) == ("Ticket", {"summary": "VPN drops", "priority": "high"})

        await send(runtime, thread, "Ada needs an IDE licence")
        assert (await approve(runtime, thread))[
            1
        ] == "helpdesk: tool_result assign_licence success {'assigned': 'IDE', 'to': 'ada'}"
        async with runtime.db.engine.connect() as connection:
            rows = (
                await connection.execute(sa.text("SELECT username, product FROM helpdesk_licences"))
            ).all()
        assert [tuple(row) for row in rows] == [("ada", "IDE")]  # the setup hook's migration made the table

        assert (await send(runtime, thread, "Make ada admin for two days"))[
            -1
        ] == "helpdesk: run_finished awaiting_approval"
        assert (await approve(runtime, thread))[
            1
        ] == "helpdesk: tool_result grant_admin success 'ada is admin for 48 hours.'"


def test_the_served_helpdesk_answers_with_its_name_and_prompts(project: Path, directory: Directory) -> None:
    server = LiveServer(sqlite_url(project / "served"), project, app="helpdesk:app", model=None)
    (project / "served").mkdir(exist_ok=True)
    server.start()
    try:
        info = httpx.get(f"{server.base_url}/api/app", headers=auth(server.token("ada")), timeout=10).json()
    finally:
        server.stop()
    assert info == {
        "name": "IT helpdesk",
        "starter_prompts": ["I forgot my password", "My laptop was stolen"],
    }


def test_the_pages_own_asgi_app_signs_users_in_its_way(helpdesk: ChatApp[Any]) -> None:
    module = sys.modules["helpdesk"]

    with TestClient(module.asgi) as client:
        vouched = client.get("/api/app", headers={"x-forwarded-user": "ada"})
        anonymous = client.get("/api/app")

    assert (vouched.status_code, vouched.json()["name"]) == (200, "IT helpdesk")
    assert anonymous.status_code == 401


async def test_several_agents_of_the_page_delegate_pause_nested_and_hand_off(
    helpdesk: ChatApp[Any], project: Path
) -> None:
    module = sys.modules["helpdesk"]
    (project / "agents").mkdir(exist_ok=True)
    (project / "desk").mkdir(exist_ok=True)
    script = Script([Calls([("ask_purchasing", {"request": "two Figma seats"})]), "Done: bought."])
    purchases = Script([Calls([("buy_seat", {"product": "Figma", "seats": 2})]), "Bought them."])
    async with AsyncExitStack() as stack:
        runtime = await stack.enter_async_context(open_runtime(helpdesk, sqlite_url(project / "agents")))
        runtime = replace(runtime, model=script.model())
        stack.enter_context(module.purchasing.override(model=purchases.model()))
        thread = await runtime.db.threads.create(user_id="ada", title="licences")

        paused = await send(runtime, thread, "Buy two Figma seats")
        [pending] = await runtime.db.approvals.list(thread_id=thread.thread_id, status="pending")
        done = await approve(runtime, thread, product="Figma", seats=1)

    assert paused[-2:] == [
        "helpdesk: approval_required [buy_seat {'product': 'Figma', 'seats': 2}]",
        "helpdesk: run_finished awaiting_approval",
    ]
    assert (pending.agent, pending.path) == ("purchasing", ("helpdesk", "purchasing"))
    assert "purchasing: tool_result buy_seat success 'Bought 1 seat(s) of Figma.'" in done
    assert done[-1] == "helpdesk: run_finished completed output='Done: bought.'"

    desk: ChatApp[Any] = module.desk
    router = Script([Calls([("transfer_to_billing", {})]), "Billing will take it from here."])
    billing = Script(["Invoice 7 is paid."])
    async with AsyncExitStack() as stack:
        runtime = await stack.enter_async_context(open_runtime(desk, sqlite_url(project / "desk")))
        stack.enter_context(module.helpdesk.override(model=router.model()))
        stack.enter_context(module.billing.override(model=billing.model()))
        thread = await runtime.db.threads.create(user_id="ada", title="invoice")
        handed = await send(runtime, thread, "Is invoice 7 paid?")
        answered = await send(runtime, thread, "Invoice 7")
        stored = await runtime.db.threads.get(thread.thread_id)

    assert "agent_changed helpdesk -> billing" in handed
    assert answered[-1] == "billing: run_finished completed output='Invoice 7 is paid.'"
    assert stored.agent == "billing"
