"""Bearer tokens: a user name and an expiry, signed with the server's secret (HMAC-SHA256).

A token is `v1.<user, base64url>.<expiry, unix seconds>.<signature, base64url>`. It names one
user; everything the API does is scoped to that user. Tokens are not stored: changing the
secret revokes them all.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import time
from dataclasses import dataclass

__all__ = ("DEFAULT_TTL_SECONDS", "InvalidToken", "TokenClaims", "issue_token", "verify_token")

DEFAULT_TTL_SECONDS = 30 * 24 * 3600
_VERSION = "v1"
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


def issue_token(
    secret: str, user_id: str, *, ttl_seconds: int = DEFAULT_TTL_SECONDS, now: float | None = None
) -> str:
    """A token for `user_id`, valid for `ttl_seconds`."""
    if not user_id or len(user_id) > _MAX_USER_LENGTH or any(ord(c) < 32 for c in user_id):
        raise ValueError(f"a user name must be 1 to {_MAX_USER_LENGTH} printable characters, not {user_id!r}")
    expires_at = int((time.time() if now is None else now) + ttl_seconds)
    payload = f"{_VERSION}.{_b64(user_id.encode())}.{expires_at}"
    return f"{payload}.{_sign(secret, payload)}"


def verify_token(secret: str, token: str, *, now: float | None = None) -> TokenClaims:
    """The claims of a valid token.

    Raises:
        InvalidToken: code `invalid_token` (malformed or forged) or `token_expired`.
    """
    parts = token.split(".")
    # ASCII only: `compare_digest` refuses to compare other text (a TypeError, not a mismatch).
    if not token.isascii() or len(parts) != 4 or parts[0] != _VERSION or not parts[2].isdigit():
        raise InvalidToken("invalid_token", "the bearer token is malformed")
    payload = ".".join(parts[:3])
    if not hmac.compare_digest(_sign(secret, payload), parts[3]):
        raise InvalidToken("invalid_token", "the bearer token's signature is not valid")
    try:
        user_id = base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4)).decode()
    except (ValueError, UnicodeDecodeError) as error:
        raise InvalidToken("invalid_token", "the bearer token is malformed") from error
    expires_at = int(parts[2])
    if expires_at <= (time.time() if now is None else now):
        raise InvalidToken("token_expired", "the bearer token has expired; ask for a new one")
    return TokenClaims(user_id=user_id, expires_at=expires_at)


def _sign(secret: str, payload: str) -> str:
    return _b64(hmac.new(secret.encode(), payload.encode(), hashlib.sha256).digest())


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()
