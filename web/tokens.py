"""Bearer tokens: a user name and an expiry, signed with the server's secret (HMAC-SHA256).

A token is `v1.<user, base64url>.<expiry, unix seconds>.<signature, base64url>`, or with review
roles `v2.<user>.<roles, base64url of space-separated names>.<expiry>.<signature>`. It names one
user; everything the API does is scoped to that user, and its roles let them review. Tokens are not stored: changing the
secret revokes them all.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import time
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ("DEFAULT_TTL_SECONDS", "InvalidToken", "TokenClaims", "issue_token", "verify_token")

DEFAULT_TTL_SECONDS = 30 * 24 * 3600
_VERSION = "v1"
_VERSION_ROLES = "v2"
_MAX_USER_LENGTH = 255


class InvalidToken(Exception):
    """The token is malformed, forged or expired; the message says which, for the 401 body."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class TokenClaims:
    user_id: str
    expires_at: int
    roles: tuple[str, ...] = ()


def issue_token(
    secret: str,
    user_id: str,
    *,
    ttl_seconds: int = DEFAULT_TTL_SECONDS,
    now: float | None = None,
    roles: Sequence[str] = (),
) -> str:
    """A token for `user_id`, valid for `ttl_seconds`, giving the review `roles`."""
    if not user_id or len(user_id) > _MAX_USER_LENGTH or any(ord(c) < 32 for c in user_id):
        raise ValueError(f"a user name must be 1 to {_MAX_USER_LENGTH} printable characters, not {user_id!r}")
    for role in roles:
        if not role or role == "user" or len(role) > _MAX_USER_LENGTH or any(ord(c) <= 32 for c in role):
            raise ValueError(
                f"a role must be 1 to {_MAX_USER_LENGTH} printable characters, no spaces, not 'user': {role!r}"
            )
    expires_at = int((time.time() if now is None else now) + ttl_seconds)
    payload = f"{_VERSION}.{_b64(user_id.encode())}.{expires_at}"
    if roles:
        payload = f"{_VERSION_ROLES}.{_b64(user_id.encode())}.{_b64(' '.join(roles).encode())}.{expires_at}"
    return f"{payload}.{_sign(secret, payload)}"


def verify_token(secret: str, token: str, *, now: float | None = None) -> TokenClaims:
    """The claims of a valid token.

    Raises:
        InvalidToken: code `invalid_token` (malformed or forged) or `token_expired`.
    """
    parts = token.split(".")
    # ASCII only: `compare_digest` refuses to compare other text (a TypeError, not a mismatch).
    with_roles = len(parts) == 5 and parts[0] == _VERSION_ROLES
    if (
        not token.isascii()
        or not (with_roles or (len(parts) == 4 and parts[0] == _VERSION))
        or not parts[-2].isdigit()
    ):
        raise InvalidToken("invalid_token", "the bearer token is malformed")
    payload = ".".join(parts[:-1])
    if not hmac.compare_digest(_sign(secret, payload), parts[-1]):
        raise InvalidToken("invalid_token", "the bearer token's signature is not valid")
    try:
        user_id = _unb64(parts[1])
        roles = tuple(_unb64(parts[2]).split()) if with_roles else ()
    except (ValueError, UnicodeDecodeError) as error:
        raise InvalidToken("invalid_token", "the bearer token is malformed") from error
    expires_at = int(parts[-2])
    if expires_at <= (time.time() if now is None else now):
        raise InvalidToken("token_expired", "the bearer token has expired; ask for a new one")
    return TokenClaims(user_id=user_id, expires_at=expires_at, roles=roles)


def _unb64(text: str) -> str:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)).decode()


def _sign(secret: str, payload: str) -> str:
    return _b64(hmac.new(secret.encode(), payload.encode(), hashlib.sha256).digest())


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()
