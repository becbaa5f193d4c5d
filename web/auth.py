"""Who a request comes from: the built-in tokens, the identity provider's JWTs, or your callable.

`Authentication` (an ASGI middleware) resolves the user of every `/api/` request once, before
routing, with whichever verifier the app was built with; the handlers read the outcome with
`user_id(request)`, which raises the 400 or 401 the verifier decided. Resolving ahead keeps the
handlers synchronous while a verifier may await (a JWKS fetch, your own lookup). See `docs/web.md`.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from starlette.requests import Request
from starlette.types import ASGIApp, Receive, Scope, Send

from .errors import ApiError
from .text import unstorable
from .tokens import InvalidToken, verify_token

__all__ = (
    "API_PREFIX",
    "Authenticate",
    "Authentication",
    "Principal",
    "Verifier",
    "bearer_token",
    "builtin_tokens",
    "checked_roles",
    "custom",
    "principal",
    "roles_of",
    "unauthorized",
    "user_id",
)

logger = logging.getLogger(__name__)

API_PREFIX = "/api/"
"""Requests under this path are authenticated; `/healthz`, the page and its files are not."""

_STATE_KEY = "durable_chat_user"
_CHALLENGE = {"WWW-Authenticate": "Bearer"}
_MAX_USER_LENGTH = 255


class Authenticate(Protocol):
    """Your own sign-in: the request's user id; `None` or raising means `401`.

    It gets the request's headers, cookies and URL (not its body) and may be sync or async. An
    `ApiError` it raises is answered as it is (say a `503` when your identity service is down).
    """

    def __call__(self, request: Request, /) -> str | Awaitable[str | None] | None: ...


@dataclass(frozen=True)
class Principal:
    """Who a request comes from: the user, and the review roles a verified token gives them."""

    user_id: str
    roles: frozenset[str] = frozenset()


Verifier = Callable[[Request], Awaitable[Principal]]
"""What `Authentication` runs: who sent a request, or an `ApiError` (400/401/503)."""


class Authentication:
    """Resolves the user of every `/api/` request with `verify`, for `user_id` to read."""

    def __init__(self, app: ASGIApp, verify: Verifier) -> None:
        self._app = app
        self._verify = verify

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and str(scope["path"]).startswith(API_PREFIX):
            outcome: Principal | ApiError
            try:
                outcome = await self._verify(Request(scope))
            except ApiError as error:
                outcome = error
            scope.setdefault("state", {})[_STATE_KEY] = outcome
        await self._app(scope, receive, send)


def user_id(request: Request) -> str:
    """The user `Authentication` found for `request`.

    Raises:
        ApiError: The 400 or 401 (or your callable's error) the verifier decided.
    """
    return principal(request).user_id


def roles_of(request: Request) -> frozenset[str]:
    """The review roles of the request's verified token (none for your `authenticate` callable)."""
    return principal(request).roles


def principal(request: Request) -> Principal:
    """Who `Authentication` found `request` comes from; the 400 or 401 it decided otherwise."""
    outcome: object = request.scope.get("state", {}).get(_STATE_KEY)
    if isinstance(outcome, ApiError):
        raise outcome
    assert isinstance(outcome, Principal), (
        f"{request.url.path!r} is not under {API_PREFIX!r}, so not authenticated"
    )
    return outcome


def bearer_token(request: Request) -> str:
    """The token of the request's one `Authorization: Bearer <token>` header.

    Raises:
        ApiError: 400 `ambiguous_credentials` for several headers; 401 `missing_token` or `invalid_token`.
    """
    headers = request.headers.getlist("authorization")
    if len(headers) > 1:
        # Proxies and servers disagree on which of several wins: refuse to pick one.
        raise ApiError(
            400,
            "ambiguous_credentials",
            f"the request has {len(headers)} Authorization headers; send exactly one",
            headers={"WWW-Authenticate": 'Bearer error="invalid_request"'},
        )
    if not headers or not headers[0].strip():
        raise ApiError(
            401, "missing_token", "this endpoint needs an Authorization: Bearer token", headers=_CHALLENGE
        )
    scheme, _, token = headers[0].strip().partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise ApiError(
            401, "invalid_token", "the Authorization header must be 'Bearer <token>'", headers=_CHALLENGE
        )
    return token.strip()


def unauthorized(code: str, message: str) -> ApiError:
    """A 401 with the Bearer challenge naming what was wrong with the token."""
    challenge = {"WWW-Authenticate": f'Bearer error="invalid_token", error_description="{code}"'}
    return ApiError(401, code, message, headers=challenge)


def checked_user(value: object, *, source: str) -> str:
    """`value` as a user id: a non-empty string of at most 255 storable characters.

    Raises:
        ApiError: 401 `invalid_token` naming `source`.
    """
    if not isinstance(value, str) or not value or len(value) > _MAX_USER_LENGTH or unstorable(value):
        raise unauthorized("invalid_token", f"{source} does not name a usable user")
    return value


def checked_roles(value: object, *, source: str) -> frozenset[str]:
    """`value` (a list of names, or one space-separated string; absent: none) as review roles.

    `user` is never a role: it names the thread's own user, who needs no token role to decide.

    Raises:
        ApiError: 401 `invalid_token` naming `source` for anything else.
    """
    if value is None:
        return frozenset()
    names: Sequence[object] = [None]
    if isinstance(value, str):
        names = value.split()
    elif isinstance(value, list):
        names = list(value)  # pyright: ignore[reportUnknownArgumentType]
    if not all(isinstance(n, str) and n and len(n) <= _MAX_USER_LENGTH and not unstorable(n) for n in names):
        raise unauthorized("invalid_token", f"{source} are not a list of role names")
    return frozenset(str(n) for n in names) - {"user"}


def builtin_tokens(secret: str) -> Verifier:
    """The built-in `v1.` tokens signed with `secret` (`durable-chat token USER`)."""

    async def verify(request: Request) -> Principal:
        try:
            claims = verify_token(secret, bearer_token(request))
        except InvalidToken as error:
            raise unauthorized(error.code, str(error)) from error
        user = checked_user(claims.user_id, source="the bearer token")
        return Principal(user, checked_roles(list(claims.roles), source="the bearer token's roles"))

    return verify


def custom(authenticate: Authenticate) -> Verifier:
    """Your `authenticate` callable; `None` or an exception (but `ApiError`) is a 401."""

    async def verify(request: Request) -> Principal:
        if len(request.headers.getlist("authorization")) > 1:
            bearer_token(request)  # the same 400 whoever authenticates
        try:
            found = authenticate(request)
            if inspect.isawaitable(found):
                found = await found
        except ApiError:
            raise
        except Exception:
            # DEBUG only: anyone can make a sign-in fail, and each failure is already a 401.
            logger.debug("the authenticate callable refused a request", exc_info=True)
            found = None
        if found is None:
            raise ApiError(
                401, "unauthenticated", "the request's credentials were not accepted", headers=_CHALLENGE
            )
        return Principal(checked_user(found, source="the authenticate callable's answer"))

    return verify
