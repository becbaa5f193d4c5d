"""The bearer-token check: every API request names its user with a signed token."""

from __future__ import annotations

from starlette.requests import Request

from .errors import ApiError
from .tokens import InvalidToken, verify_token

__all__ = ("authenticate",)

_CHALLENGE = {"WWW-Authenticate": "Bearer"}


def authenticate(request: Request, secret: str) -> str:
    """The user the request's `Authorization: Bearer <token>` names.

    Raises:
        ApiError: 401 `missing_token`, `invalid_token` or `token_expired`, with a Bearer challenge.
    """
    header = request.headers.get("authorization")
    if header is None or not header.strip():
        raise ApiError(
            401, "missing_token", "this endpoint needs an Authorization: Bearer token", headers=_CHALLENGE
        )
    scheme, _, token = header.strip().partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise ApiError(
            401, "invalid_token", "the Authorization header must be 'Bearer <token>'", headers=_CHALLENGE
        )
    try:
        return verify_token(secret, token.strip()).user_id
    except InvalidToken as error:
        challenge = {"WWW-Authenticate": f'Bearer error="invalid_token", error_description="{error.code}"'}
        raise ApiError(401, error.code, str(error), headers=challenge) from error
