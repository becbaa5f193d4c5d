"""JWTs from an identity provider: HS256 with a shared secret, RS256/ES256 from a JWKS served for real.

Every key is generated here; the JWKS comes from a real HTTP server on the loopback.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import threading
import time
from collections.abc import AsyncIterator, Iterator, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from jwt.algorithms import ECAlgorithm, RSAAlgorithm

from web import Settings, SettingsError
from web.jwks import KeySet

from .asgi import Api, error_of, open_api
from .live_server import sqlite_url

pytestmark = pytest.mark.anyio

AUDIENCE = "durable-chat"
ISSUER = "https://idp.example.test/"
HS_SECRET = "an-hs256-secret-of-at-least-32-bytes!"
RSA_KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)
OTHER_RSA_KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)
EC_KEY = ec.generate_private_key(ec.SECP256R1())


@dataclass
class Provider:
    """A JWKS endpoint on the loopback: `keys` is what it publishes, `requests` how often it was asked."""

    keys: list[dict[str, object]] = field(default_factory=list)
    requests: int = 0
    url: str = ""


@pytest.fixture
def provider() -> Iterator[Provider]:
    served = Provider()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            served.requests += 1
            body = json.dumps({"keys": served.keys}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    served.url = f"http://127.0.0.1:{server.server_address[1]}/.well-known/jwks.json"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield served
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def rsa_jwk(key: rsa.RSAPrivateKey, kid: str) -> dict[str, object]:
    return {**RSAAlgorithm.to_jwk(key.public_key(), as_dict=True), "kid": kid, "use": "sig"}


def ec_jwk(key: ec.EllipticCurvePrivateKey, kid: str) -> dict[str, object]:
    return {**ECAlgorithm.to_jwk(key.public_key(), as_dict=True), "kid": kid, "use": "sig"}


def claims(**changes: object) -> dict[str, object]:
    now = int(time.time())
    found: dict[str, object] = {"sub": "ada", "aud": AUDIENCE, "iss": ISSUER, "iat": now, "exp": now + 600}
    found.update(changes)
    return {name: value for name, value in found.items() if value is not None}


def b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def hand_signed(header: Mapping[str, object], payload: Mapping[str, object], key: bytes | None) -> str:
    """A token signed (HS256) or not (`alg: none`) by hand, as an attacker would make one."""
    signing_input = f"{b64(json.dumps(header).encode())}.{b64(json.dumps(payload).encode())}"
    signature = b"" if key is None else hmac.new(key, signing_input.encode(), hashlib.sha256).digest()
    return f"{signing_input}.{b64(signature)}"


def jwt_env(**variables: str) -> dict[str, str]:
    return {f"DURABLE_CHAT_JWT_{name.upper()}": value for name, value in variables.items()}


@pytest.fixture
async def hs256(tmp_path: Path) -> AsyncIterator[Api]:
    env = jwt_env(secret=HS_SECRET, audience=AUDIENCE, issuer=ISSUER)
    async with open_api(sqlite_url(tmp_path), tmp_path, env=env) as opened:
        yield opened


@pytest.fixture
async def rs256(tmp_path: Path, provider: Provider) -> AsyncIterator[Api]:
    provider.keys = [rsa_jwk(RSA_KEY, "rsa-1")]
    env = jwt_env(jwks_url=provider.url, audience=AUDIENCE, issuer=ISSUER)
    async with open_api(sqlite_url(tmp_path), tmp_path, env=env) as opened:
        yield opened


async def status_of(api: Api, token: str) -> tuple[int, str]:
    """`(200, user)` for an accepted token, else the status and error code (the body's shape checked)."""
    response = await api.client.get("/api/threads", headers={"Authorization": f"Bearer {token}"})
    if response.status_code == 200:
        # The user the token named owns what it creates: its threads are listed under that name only.
        return 200, "accepted"
    if response.status_code == 401:
        assert response.headers["www-authenticate"].startswith("Bearer")
    return error_of(response.status_code, response.content)


async def test_hs256_tokens_sign_their_user_in(hs256: Api) -> None:
    token = jwt.encode(claims(sub="ada"), HS_SECRET, algorithm="HS256")
    created = await hs256.client.post("/api/threads", json={}, headers={"Authorization": f"Bearer {token}"})
    assert created.status_code == 201
    other = jwt.encode(claims(sub="grace"), HS_SECRET, algorithm="HS256")
    listed = await hs256.client.get("/api/threads", headers={"Authorization": f"Bearer {other}"})
    assert listed.json()["threads"] == []  # grace does not see ada's thread
    again = await hs256.client.get("/api/threads", headers={"Authorization": f"Bearer {token}"})
    assert [t["thread_id"] for t in again.json()["threads"]] == [created.json()["thread_id"]]


async def test_hs256_refusals(hs256: Api) -> None:
    now = int(time.time())
    cases = {
        "alg none": hand_signed({"alg": "none", "typ": "JWT"}, claims(), None),
        "alg none, upper case": hand_signed({"alg": "NONE", "typ": "JWT"}, claims(), None),
        "another secret": jwt.encode(claims(), "another-secret-of-at-least-32-bytes!!", algorithm="HS256"),
        "expired": jwt.encode(claims(exp=now - 3600), HS_SECRET, algorithm="HS256"),
        "no expiry": jwt.encode(claims(exp=None), HS_SECRET, algorithm="HS256"),
        "not yet valid": jwt.encode(claims(nbf=now + 3600), HS_SECRET, algorithm="HS256"),
        "wrong audience": jwt.encode(claims(aud="another-service"), HS_SECRET, algorithm="HS256"),
        "no audience": jwt.encode(claims(aud=None), HS_SECRET, algorithm="HS256"),
        "wrong issuer": jwt.encode(claims(iss="https://evil.example.test/"), HS_SECRET, algorithm="HS256"),
        "no user claim": jwt.encode(claims(sub=None), HS_SECRET, algorithm="HS256"),
        "user claim not a string": jwt.encode(claims(sub=42), HS_SECRET, algorithm="HS256"),
        "user with a NUL": jwt.encode(claims(sub="a\x00b"), HS_SECRET, algorithm="HS256"),
        "HS512 with the right secret": jwt.encode(claims(), HS_SECRET + "x" * 40, algorithm="HS512"),
        "a built-in token": hs256.token("ada"),
        "garbage": "not.a.jwt",
    }
    expected = {name: (401, "invalid_token") for name in cases}
    expected["expired"] = (401, "token_expired")
    assert {name: await status_of(hs256, token) for name, token in cases.items()} == expected
    # A valid one, for contrast.
    assert await status_of(hs256, jwt.encode(claims(), HS_SECRET, algorithm="HS256")) == (200, "accepted")


async def test_rs256_from_the_providers_jwks(rs256: Api, provider: Provider) -> None:
    now = int(time.time())
    public_pem = RSA_KEY.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    confused = hand_signed({"alg": "HS256", "typ": "JWT", "kid": "rsa-1"}, claims(), public_pem)
    confused_no_kid = hand_signed({"alg": "HS256", "typ": "JWT"}, claims(), public_pem)
    cases = {
        "valid": jwt.encode(claims(), RSA_KEY, algorithm="RS256", headers={"kid": "rsa-1"}),
        "key confusion: the public key as an HS256 secret": confused,
        "key confusion, no kid": confused_no_kid,
        "alg none": hand_signed({"alg": "none", "kid": "rsa-1"}, claims(), None),
        "signed by a key the provider does not list": jwt.encode(
            claims(), OTHER_RSA_KEY, algorithm="RS256", headers={"kid": "rsa-1"}
        ),
        "an unknown kid": jwt.encode(claims(), OTHER_RSA_KEY, algorithm="RS256", headers={"kid": "rsa-9"}),
        "expired": jwt.encode(claims(exp=now - 3600), RSA_KEY, algorithm="RS256", headers={"kid": "rsa-1"}),
        "not yet valid": jwt.encode(
            claims(nbf=now + 3600), RSA_KEY, algorithm="RS256", headers={"kid": "rsa-1"}
        ),
        "wrong audience": jwt.encode(claims(aud="x"), RSA_KEY, algorithm="RS256", headers={"kid": "rsa-1"}),
        "wrong issuer": jwt.encode(
            claims(iss="https://x/"), RSA_KEY, algorithm="RS256", headers={"kid": "rsa-1"}
        ),
        "no user claim": jwt.encode(claims(sub=None), RSA_KEY, algorithm="RS256", headers={"kid": "rsa-1"}),
        "PS256 with the listed key": jwt.encode(
            claims(), RSA_KEY, algorithm="PS256", headers={"kid": "rsa-1"}
        ),
    }
    expected = {name: (401, "invalid_token") for name in cases}
    expected["valid"] = (200, "accepted")
    expected["expired"] = (401, "token_expired")
    assert {name: await status_of(rs256, token) for name, token in cases.items()} == expected
    # Fetched once: the unknown kid came within the refresh interval (30 s) of that fetch.
    assert provider.requests == 1


async def test_a_rotated_key_is_fetched_once_and_made_up_kids_do_not_hammer_the_provider(
    provider: Provider,
) -> None:
    provider.keys = [rsa_jwk(RSA_KEY, "old")]
    clock = [1000.0]
    keys = KeySet(provider.url, algorithm="RS256", refresh_interval=30, max_age=600, clock=lambda: clock[0])
    assert (await keys.key("old")) is not None
    assert provider.requests == 1
    # The provider rotates: a token names the new key; the set is fetched again at once.
    provider.keys = [rsa_jwk(RSA_KEY, "old"), rsa_jwk(OTHER_RSA_KEY, "new")]
    clock[0] += 31
    assert (await keys.key("new")) is not None
    assert provider.requests == 2
    # A hundred made-up kids within the refresh interval: no fetch at all.
    for n in range(100):
        assert (await keys.key(f"made-up-{n}")) is None
    assert provider.requests == 2
    # After the interval, one more; after the cache's age, the set is fetched again anyway.
    clock[0] += 30
    assert (await keys.key("made-up")) is None
    assert provider.requests == 3
    clock[0] += 600
    assert (await keys.key("new")) is not None
    assert provider.requests == 4


async def test_es256_from_the_providers_jwks(tmp_path: Path, provider: Provider) -> None:
    # The set also lists an RSA key: with ES256 pinned it is never used.
    provider.keys = [ec_jwk(EC_KEY, "ec-1"), rsa_jwk(RSA_KEY, "rsa-1")]
    env = jwt_env(jwks_url=provider.url, audience=AUDIENCE, algorithm="ES256", user_claim="email")
    async with open_api(sqlite_url(tmp_path), tmp_path, env=env) as api:
        signed = jwt.encode(
            claims(email="ada@example.test", iss=None), EC_KEY, algorithm="ES256", headers={"kid": "ec-1"}
        )
        assert await status_of(api, signed) == (200, "accepted")
        created = await api.client.post(
            "/api/threads", json={}, headers={"Authorization": f"Bearer {signed}"}
        )
        assert created.status_code == 201
        rsa_signed = jwt.encode(
            claims(email="ada@example.test"), RSA_KEY, algorithm="RS256", headers={"kid": "rsa-1"}
        )
        no_email = jwt.encode(claims(), EC_KEY, algorithm="ES256", headers={"kid": "ec-1"})
        expired = jwt.encode(
            claims(email="a@b", exp=int(time.time()) - 3600),
            EC_KEY,
            algorithm="ES256",
            headers={"kid": "ec-1"},
        )
        assert await status_of(api, rsa_signed) == (401, "invalid_token")
        assert await status_of(api, no_email) == (401, "invalid_token")
        assert await status_of(api, expired) == (401, "token_expired")


async def test_an_unreachable_provider_is_a_503_not_a_401(tmp_path: Path) -> None:
    env = jwt_env(jwks_url="http://127.0.0.1:9/jwks.json", audience=AUDIENCE)  # the discard port: refused
    async with open_api(sqlite_url(tmp_path), tmp_path, env=env) as api:
        token = jwt.encode(claims(), RSA_KEY, algorithm="RS256", headers={"kid": "rsa-1"})
        response = await api.client.get("/api/threads", headers={"Authorization": f"Bearer {token}"})
        assert error_of(response.status_code, response.content) == (503, "identity_provider_unavailable")
        # The time left of the first back-off (5 s), whole seconds rounded up: never 0, never more.
        assert 1 <= int(response.headers["retry-after"]) <= 5


@pytest.mark.parametrize(
    ("variables", "message"),
    [
        ({"secret": HS_SECRET, "jwks_url": "https://idp.test/jwks"}, "not both"),
        ({"secret": "too short", "audience": AUDIENCE}, "at least 32 bytes"),
        ({"secret": HS_SECRET}, "JWT_AUDIENCE is required"),
        ({"secret": HS_SECRET, "audience": AUDIENCE, "algorithm": "RS256"}, "must be one of HS256"),
        ({"jwks_url": "https://idp.test/jwks", "audience": AUDIENCE, "algorithm": "HS256"}, "RS256, ES256"),
        ({"jwks_url": "https://idp.test/jwks", "audience": AUDIENCE, "algorithm": "none"}, "RS256, ES256"),
        ({"jwks_url": "http://idp.test/jwks", "audience": AUDIENCE}, "https://"),
        ({"audience": AUDIENCE}, "need DURABLE_CHAT_JWT_SECRET"),
    ],
)
def test_settings_that_cannot_be_safe_are_refused(variables: dict[str, str], message: str) -> None:
    with pytest.raises(SettingsError, match=message):
        Settings.load(database_url="sqlite+aiosqlite:///x.db", secret="s", environ=jwt_env(**variables))


def test_settings_default_to_the_built_in_tokens_and_keep_the_jwt_secret_secret() -> None:
    assert Settings.load(database_url="sqlite+aiosqlite:///x.db", secret="s", environ={}).jwt is None
    loaded = Settings.load(
        database_url="sqlite+aiosqlite:///x.db",
        secret="s",
        environ=jwt_env(secret=HS_SECRET, audience=AUDIENCE),
    )
    assert loaded.jwt is not None
    assert (loaded.jwt.algorithm, loaded.jwt.user_claim, loaded.jwt.issuer) == ("HS256", "sub", None)
    assert HS_SECRET not in repr(loaded)
    assert HS_SECRET in loaded.tracing.secrets  # redacted from logs and spans
    jwks = Settings.load(
        database_url="sqlite+aiosqlite:///x.db",
        secret="s",
        environ=jwt_env(jwks_url="http://127.0.0.1:8/jwks", audience=AUDIENCE),
    )
    assert jwks.jwt is not None
    assert jwks.jwt.algorithm == "RS256"


async def test_roles_come_from_the_verified_jwts_roles_claim(hs256: Api) -> None:
    async def queue(token: str) -> tuple[int, str]:
        response = await hs256.client.get(
            "/api/review/approvals", headers={"Authorization": f"Bearer {token}"}
        )
        if response.status_code == 200:
            return 200, "reviewer"
        return error_of(response.status_code, response.content)

    as_list = jwt.encode(claims(roles=["support"]), HS_SECRET, algorithm="HS256")
    as_text = jwt.encode(claims(roles="support managers"), HS_SECRET, algorithm="HS256")
    no_roles = jwt.encode(claims(), HS_SECRET, algorithm="HS256")
    forged = hand_signed({"alg": "HS256", "typ": "JWT"}, claims(roles=["support"]), b"not-the-secret")
    malformed = jwt.encode(claims(roles=[5]), HS_SECRET, algorithm="HS256")
    only_user = jwt.encode(claims(roles=["user"]), HS_SECRET, algorithm="HS256")
    assert [await queue(t) for t in (as_list, as_text, no_roles, forged, malformed, only_user)] == [
        (200, "reviewer"),
        (200, "reviewer"),
        (404, "not_found"),
        (401, "invalid_token"),
        (401, "invalid_token"),
        (404, "not_found"),
    ]


async def test_the_roles_claim_is_configurable(tmp_path: Path) -> None:
    env = {
        **jwt_env(secret=HS_SECRET, audience=AUDIENCE, issuer=ISSUER),
        "DURABLE_CHAT_JWT_ROLES_CLAIM": "groups",
    }
    async with open_api(sqlite_url(tmp_path), tmp_path, env=env) as api:
        token = jwt.encode(claims(groups=["support"], roles=None), HS_SECRET, algorithm="HS256")
        response = await api.client.get("/api/review/approvals", headers={"Authorization": f"Bearer {token}"})
        assert response.status_code == 200, response.text
        ignored = jwt.encode(claims(roles=["support"]), HS_SECRET, algorithm="HS256")
        response = await api.client.get(
            "/api/review/approvals", headers={"Authorization": f"Bearer {ignored}"}
        )
        assert error_of(response.status_code, response.content) == (404, "not_found")
