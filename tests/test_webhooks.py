"""Webhooks of review events to a local receiver that fails the first tries, on SQLite and PostgreSQL.

The sender is driven by calling `send_due` with a moment past each retry: no waiting on the clock.
Signatures are checked with the `standardwebhooks` library, as a receiver would.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest
from standardwebhooks.webhooks import Webhook
from starlette.applications import Starlette

from agent.demo import staffed_shop_app
from store import Database, append_review_event, now_utc
from web import create_app
from web.services import Services
from web.settings import Settings, SettingsError
from web.tokens import issue_token
from web.webhooks import WebhookSender, retry_delay

from .conftest import MigratedDatabases
from .waiting import eventually

pytestmark = pytest.mark.anyio

SECRET = "webhook-test-secret"
WEBHOOK_SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"


@dataclass
class Receiver:
    """Answers 500 to the first `failures` requests, then 204; keeps every request."""

    failures: int = 2
    received: list[tuple[dict[str, str], bytes]] = field(default_factory=list[tuple[dict[str, str], bytes]])
    lock: threading.Lock = field(default_factory=threading.Lock)
    url: str = ""


@contextmanager
def serving(handler: type[BaseHTTPRequestHandler]) -> Iterator[str]:
    """`handler` serving on a local port in threads of this process: its webhook URL."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/hooks"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


@contextmanager
def receiving(failures: int = 2) -> Iterator[Receiver]:
    """A local webhook endpoint in a thread of this process (see `Receiver`)."""
    served = Receiver(failures=failures)

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            with served.lock:
                served.received.append(({k.lower(): v for k, v in self.headers.items()}, body))
                failing = len(served.received) <= served.failures
            self.send_response(500 if failing else 204)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: object) -> None:
            pass

    with serving(Handler) as url:
        served.url = url
        yield served


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with receiving() as served:
        yield served


@pytest.fixture(params=[pytest.param("sqlite"), pytest.param("postgresql", marks=pytest.mark.postgres)])
async def services(
    request: pytest.FixtureRequest, migrated_databases: MigratedDatabases
) -> AsyncIterator[Services]:
    url = await migrated_databases.empty(request.param)
    settings = Settings(database_url=url, model="demo", secret=SECRET, deadline_poll_seconds=3600)
    app: Starlette = create_app(settings, staffed_shop_app(delay=0))
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test", timeout=30) as client:
            headers = {"Authorization": f"Bearer {issue_token(SECRET, 'alice')}"}
            thread = (await client.post("/api/threads", json={}, headers=headers)).json()["thread_id"]
            sent = await client.post(
                f"/api/threads/{thread}/messages", json={"content": "Please refund ORD-9012"}, headers=headers
            )
            assert sent.status_code == 202

            async def paused() -> bool | None:
                detail = (await client.get(f"/api/threads/{thread}", headers=headers)).json()
                return True if detail["status"] == "awaiting_approval" else None

            await eventually(paused)
            found = app.state.services
            assert isinstance(found, Services)
            yield found


async def test_a_failing_endpoint_gets_the_same_message_until_it_answers(
    services: Services, receiver: Receiver
) -> None:
    sender = WebhookSender(services.db, [receiver.url], WEBHOOK_SECRET)

    assert await sender.send_due() == 0
    [failing] = await services.db.webhooks.undelivered()
    assert (failing.type, failing.attempts, failing.last_error) == ("approval_requested", 1, "answered 500")
    assert failing.next_attempt_at is not None
    assert await sender.send_due(now=failing.next_attempt_at - timedelta(milliseconds=1)) == 0
    assert len(receiver.received) == 1

    assert await sender.send_due(now=now_utc() + timedelta(seconds=30)) == 0
    assert await sender.send_due(now=now_utc() + timedelta(minutes=5)) == 1
    assert await services.db.webhooks.undelivered() == []
    assert await sender.send_due(now=now_utc() + timedelta(hours=2)) == 0

    assert len(receiver.received) == 3
    verifier = Webhook(WEBHOOK_SECRET)
    payloads = [verifier.verify(body, headers) for headers, body in receiver.received]
    assert len({headers["webhook-id"] for headers, _ in receiver.received}) == 1
    assert payloads[0] == payloads[2]
    assert payloads[0]["type"] == "approval.requested"
    assert payloads[0]["data"]["reviewers"] == "support"
    assert payloads[0]["data"]["user_id"] == "alice"
    assert payloads[0]["data"]["tool_name"] == "issue_refund"


async def test_a_forged_signature_is_refused_by_the_library(services: Services, receiver: Receiver) -> None:
    receiver.failures = 0
    sender = WebhookSender(services.db, [receiver.url], "whsec_" + "QUJD" * 8)
    assert await sender.send_due() == 1
    [(headers, body)] = receiver.received
    with pytest.raises(Exception, match="signature"):
        Webhook(WEBHOOK_SECRET).verify(body, headers)
    assert json.loads(body)["type"] == "approval.requested"


async def test_a_delivery_claimed_by_a_worker_that_died_is_sent_again(
    services: Services, receiver: Receiver
) -> None:
    receiver.failures = 0
    await services.db.webhooks.schedule(receiver.url, since=timedelta(hours=25))
    # A worker claims it and dies before sending: nobody else takes it while its hold lasts.
    [held] = await services.db.webhooks.claim(now_utc(), hold=timedelta(minutes=2))
    sender = WebhookSender(services.db, [receiver.url], WEBHOOK_SECRET)
    assert await sender.send_due() == 0
    assert await sender.send_due(now=now_utc() + timedelta(minutes=3)) == 1
    [(headers, _)] = receiver.received
    assert headers["webhook-id"] == f"msg_{held.event_id}"


async def test_a_sender_that_dies_mid_request_holds_its_delivery_for_three_timeouts(
    services: Services,
) -> None:
    with hanging() as stuck:
        dying = WebhookSender(services.db, [stuck.url], WEBHOOK_SECRET, timeout_seconds=20)
        claimed_at = now_utc()
        task = asyncio.create_task(dying.send_due_to(stuck.url))

        async def in_flight() -> bool | None:
            with stuck.lock:
                return True if stuck.held == 1 else None

        await eventually(in_flight)
        task.cancel()  # the worker dies with the request in flight: no outcome is recorded
        with pytest.raises(asyncio.CancelledError):
            await task
    # Another worker finds it held for three timeouts (60 s), not less, and no longer than that.
    claims = services.db.webhooks
    assert (
        await claims.claim(claimed_at + timedelta(seconds=55), hold=timedelta(seconds=1), url=stuck.url) == []
    )
    [delivery] = await claims.claim(
        claimed_at + timedelta(seconds=90), hold=timedelta(seconds=1), url=stuck.url
    )
    assert f"msg_{delivery.event_id}" == stuck.ids[0]


async def test_two_senders_send_each_message_once(services: Services, receiver: Receiver) -> None:
    receiver.failures = 0
    other = await Database.connect(services.settings.database_url, migrate=False)
    try:
        senders = [
            WebhookSender(services.db, [receiver.url], WEBHOOK_SECRET),
            WebhookSender(other, [receiver.url], WEBHOOK_SECRET),
        ]
        delivered = await asyncio.gather(*(s.send_due() for s in senders))
    finally:
        await other.aclose()
    assert sorted(delivered) == [0, 1]
    assert len(receiver.received) == 1


def test_the_retries_double_from_a_second_to_an_hour() -> None:
    assert [retry_delay(n).total_seconds() for n in (1, 2, 3, 4, 12, 13, 40)] == [
        1,
        2,
        4,
        8,
        2048,
        3600,
        3600,
    ]
    # Over a day of retries before giving up (GIVE_UP_AFTER is 25 h).
    total = timedelta(0)
    attempts = 0
    while total < timedelta(hours=24):
        attempts += 1
        total += retry_delay(attempts)
    assert attempts < 40


def test_a_webhook_url_needs_a_standard_webhooks_secret(tmp_path: Path) -> None:
    base = {"DURABLE_CHAT_WEBHOOK_URL": "http://127.0.0.1:9/a, https://example.com/b"}
    with pytest.raises(SettingsError, match="WEBHOOK_SECRET"):
        Settings.load(secret=SECRET, data_dir=tmp_path, environ=base)
    with pytest.raises(SettingsError, match="WEBHOOK_SECRET"):
        Settings.load(
            secret=SECRET, data_dir=tmp_path, environ={**base, "DURABLE_CHAT_WEBHOOK_SECRET": "plain"}
        )
    with pytest.raises(SettingsError, match="WEBHOOK_URL"):
        Settings.load(
            secret=SECRET,
            data_dir=tmp_path,
            environ={"DURABLE_CHAT_WEBHOOK_URL": "ftp://x", "DURABLE_CHAT_WEBHOOK_SECRET": WEBHOOK_SECRET},
        )
    loaded = Settings.load(
        secret=SECRET, data_dir=tmp_path, environ={**base, "DURABLE_CHAT_WEBHOOK_SECRET": WEBHOOK_SECRET}
    )
    assert loaded.webhook_urls == ("http://127.0.0.1:9/a", "https://example.com/b")


@dataclass
class Hanging:
    """Holds every request unanswered until `release` is set; counts those it holds."""

    release: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)
    held: int = 0
    most_held: int = 0
    ids: list[str] = field(default_factory=list[str])
    url: str = ""


@contextmanager
def hanging() -> Iterator[Hanging]:
    """A local webhook endpoint that accepts each request and answers nothing until released."""
    served = Hanging()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers["Content-Length"]))
            with served.lock:
                served.held += 1
                served.most_held = max(served.most_held, served.held)
                served.ids.append(self.headers["webhook-id"])
            served.release.wait()
            self.send_response(204)
            self.send_header("Content-Length", "0")
            self.end_headers()
            with served.lock:
                served.held -= 1

        def log_message(self, format: str, *args: object) -> None:
            pass

    with serving(Handler) as url:
        served.url = url
        try:
            yield served
        finally:
            served.release.set()  # before the server stops: it waits for the requests it holds


async def _log_events(db: Database, count: int) -> None:
    [approval] = await db.approvals.list(status="pending", user_id="alice")
    async with db.engine.begin() as connection:
        for _ in range(count):
            await append_review_event(connection, "approval_decided", approval)


async def test_a_hanging_endpoint_holds_few_connections_and_delays_no_other(
    services: Services, receiver: Receiver
) -> None:
    receiver.failures = 0
    db = services.db
    await _log_events(db, 6)  # with the pause's own, 7 events for each endpoint
    with hanging() as stuck:
        sender = WebhookSender(
            db,
            [stuck.url, receiver.url],
            WEBHOOK_SECRET,
            poll_seconds=0.01,
            timeout_seconds=600,
            per_endpoint=2,
        )
        await sender.start()
        try:
            await eventually(lambda: _at_least(receiver, 7))
            with stuck.lock:
                assert stuck.held == 2
            # Events logged while the stuck endpoint still holds its two requests reach the other one.
            await _log_events(db, 3)
            await eventually(lambda: _at_least(receiver, 10))
            with stuck.lock:
                assert (stuck.held, stuck.most_held, len(stuck.ids)) == (2, 2, 2)
            stuck.release.set()
            await eventually(lambda: _all_delivered(db, stuck, 10))
        finally:
            await sender.aclose()
    assert stuck.most_held == 2
    assert sorted(stuck.ids) == sorted({headers["webhook-id"] for headers, _ in receiver.received})
    assert len(stuck.ids) == 10


async def _at_least(receiver: Receiver, count: int) -> bool | None:
    with receiver.lock:
        return True if len(receiver.received) >= count else None


async def _all_delivered(db: Database, endpoint: Hanging, count: int) -> bool | None:
    with endpoint.lock:
        if len(endpoint.ids) < count:
            return None
    return True if await db.webhooks.undelivered() == [] else None
