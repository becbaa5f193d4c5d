"""The identity provider's keys, fetched politely: from a real JWKS host on the loopback.

Single-flight (concurrent first requests fetch once), a back-off after a failed fetch (its
`Retry-After` honoured) with cached keys or a `503` meanwhile, a deadline on the whole fetch (a
host trickling its answer), and made-up `kid`s that cannot make a fetch per request. The clock the
key set reads is the test's, so the back-off is stepped through without waiting for it.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import anyio
import anyio.to_thread
import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa
from jwt.algorithms import RSAAlgorithm

from web.jwks import KeySet, KeySetUnavailable

from .asgi import error_of, open_api
from .live_server import sqlite_url

pytestmark = pytest.mark.anyio

AUDIENCE = "durable-chat"
RSA_KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)


def rsa_jwk(kid: str) -> dict[str, object]:
    return {**RSAAlgorithm.to_jwk(RSA_KEY.public_key(), as_dict=True), "kid": kid, "use": "sig"}


@dataclass
class Host:
    """A JWKS host: answers `keys`, or `failing` (status, Retry-After), or trickles; may hold answers."""

    keys: list[dict[str, object]] = field(default_factory=lambda: [rsa_jwk("k1")])
    failing: tuple[int, str | None] | None = None
    trickle: bool = False
    hold: threading.Event | None = None
    requests: int = 0
    arrived: threading.Event = field(default_factory=threading.Event)
    url: str = ""
    closing: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)


@pytest.fixture
def host() -> Iterator[Host]:
    with _hosted() as served:
        yield served


@pytest.fixture
def elsewhere() -> Iterator[Host]:
    """Another host, which a token's header might name."""
    with _hosted() as served:
        yield served


@contextmanager
def _hosted() -> Iterator[Host]:
    served = Host()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            with served.lock:
                served.requests += 1
            served.arrived.set()
            if served.hold is not None:
                served.hold.wait(30)
            if served.failing is not None:
                status, retry_after = served.failing
                self.send_response(status)
                if retry_after is not None:
                    self.send_header("Retry-After", retry_after)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            body = json.dumps({"keys": served.keys}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if not served.trickle:
                self.wfile.write(body)
                return
            # A byte now and then, for as long as the client listens (or the test ends).
            for byte in body:
                if served.closing.wait(0.2):
                    return
                try:
                    self.wfile.write(bytes([byte]))
                    self.wfile.flush()
                except OSError:
                    return

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    served.url = f"http://127.0.0.1:{server.server_address[1]}/.well-known/jwks.json"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield served
    finally:
        served.closing.set()
        if served.hold is not None:
            served.hold.set()
        server.shutdown()
        server.server_close()
        thread.join()


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def test_concurrent_first_requests_fetch_once(host: Host) -> None:
    host.hold = threading.Event()
    keys = KeySet(host.url, algorithm="RS256")
    found: list[object] = []

    async def ask(kid: str) -> None:
        found.append(await keys.key(kid))

    async with anyio.create_task_group() as tasks:
        for n in range(20):
            tasks.start_soon(ask, "k1" if n % 2 else f"made-up-{n}")
        # Once the held request has reached the host, all twenty wait on it.
        assert await anyio.to_thread.run_sync(host.arrived.wait, 30)
        host.hold.set()
    assert host.requests == 1
    assert keys.fetches == 1
    assert sum(key is not None for key in found) == 10


async def test_a_failed_fetch_backs_off_for_its_retry_after(host: Host) -> None:
    host.failing = (503, "120")
    clock = Clock()
    keys = KeySet(host.url, algorithm="RS256", clock=clock)
    with pytest.raises(KeySetUnavailable) as raised:
        await keys.key("k1")
    assert raised.value.retry_after == 120
    # Thirty requests with made-up kids while the provider is down: no fetch, each refused at once.
    for n in range(30):
        with pytest.raises(KeySetUnavailable):
            await keys.key(f"made-up-{n}")
    assert host.requests == 1
    clock.now += 119
    with pytest.raises(KeySetUnavailable) as raised:
        await keys.key("k1")
    assert raised.value.retry_after == 1
    assert host.requests == 1
    # The window has passed and the provider is back: one fetch, the key found.
    host.failing = None
    clock.now += 1
    assert (await keys.key("k1")) is not None
    assert host.requests == 2


async def test_without_retry_after_the_back_off_doubles(host: Host) -> None:
    host.failing = (500, None)
    clock = Clock()
    keys = KeySet(host.url, algorithm="RS256", backoff=5, max_backoff=300, clock=clock)
    waits: list[float] = []
    for _ in range(4):
        with pytest.raises(KeySetUnavailable) as raised:
            await keys.key("k1")
        waits.append(raised.value.retry_after)
        clock.now += raised.value.retry_after
    assert waits == [5, 10, 20, 40]
    assert host.requests == 4


async def test_cached_keys_serve_while_the_provider_is_down(host: Host) -> None:
    clock = Clock()
    keys = KeySet(host.url, algorithm="RS256", max_age=600, refresh_interval=30, clock=clock)
    assert (await keys.key("k1")) is not None
    host.failing = (503, "60")
    clock.now += 601  # stale: one fetch is tried, fails, and the stale keys stay in use
    assert (await keys.key("k1")) is not None
    assert host.requests == 2
    for n in range(30):  # made-up kids during the back-off: none fetches
        assert (await keys.key(f"made-up-{n}")) is None
        assert (await keys.key("k1")) is not None
    assert host.requests == 2
    clock.now += 60
    host.failing = None
    assert (await keys.key("k1")) is not None
    assert host.requests == 3


async def test_a_trickling_host_cannot_hold_a_request_past_the_deadline(host: Host) -> None:
    host.trickle = True
    keys = KeySet(host.url, algorithm="RS256", timeout=1.0)
    with anyio.fail_after(30):  # generous: the deadline (1 s) ends it long before
        with pytest.raises(KeySetUnavailable):
            await keys.key("k1")
    assert host.requests == 1


async def test_the_503_carries_the_time_left_and_made_up_kids_do_not_fetch(
    host: Host, tmp_path: Path
) -> None:
    host.failing = (503, "90")
    env = {"DURABLE_CHAT_JWT_JWKS_URL": host.url, "DURABLE_CHAT_JWT_AUDIENCE": AUDIENCE}
    async with open_api(sqlite_url(tmp_path), tmp_path, env=env) as api:
        for n in range(30):
            now = int(time.time())
            token = jwt.encode(
                {"sub": "ada", "aud": AUDIENCE, "exp": now + 600},
                RSA_KEY,
                algorithm="RS256",
                headers={"kid": f"made-up-{n}"},
            )
            answer = await api.client.get("/api/threads", headers={"Authorization": f"Bearer {token}"})
            assert error_of(answer.status_code, answer.content) == (503, "identity_provider_unavailable")
            assert 1 <= int(answer.headers["retry-after"]) <= 90
        assert host.requests == 1


async def test_no_header_makes_the_server_fetch_elsewhere(
    host: Host, elsewhere: Host, tmp_path: Path
) -> None:
    attacker = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    embedded = {**RSAAlgorithm.to_jwk(attacker.public_key(), as_dict=True), "kid": "k1"}
    elsewhere.keys = [embedded]
    env = {"DURABLE_CHAT_JWT_JWKS_URL": host.url, "DURABLE_CHAT_JWT_AUDIENCE": AUDIENCE}
    payload = {"sub": "mallory", "aud": AUDIENCE, "exp": int(time.time()) + 600}
    headers: list[dict[str, object]] = [
        {"kid": "k1", "jku": elsewhere.url},
        {"kid": "k1", "x5u": elsewhere.url},
        {"kid": "k1", "jwk": embedded},
        {"kid": "attacker", "jku": elsewhere.url, "jwk": embedded},
        {"jku": elsewhere.url},
    ]
    async with open_api(sqlite_url(tmp_path), tmp_path, env=env) as api:
        for header in headers:
            token = jwt.encode(payload, attacker, algorithm="RS256", headers=header)
            answer = await api.client.get("/api/threads", headers={"Authorization": f"Bearer {token}"})
            assert error_of(answer.status_code, answer.content) == (401, "invalid_token"), header
    assert elsewhere.requests == 0
    assert host.requests == 1
