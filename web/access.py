"""Who may do what: the request's user, and the threads that are theirs.

Every endpoint scopes what it touches to the token's user: another user's thread is a `404`,
exactly like one that does not exist.
"""

from __future__ import annotations

from starlette.requests import Request

from store import NotFound, Thread

from .auth import user_id as authenticated_user
from .errors import ApiError
from .services import Services
from .text import unstorable

__all__ = ("MAX_ID_LENGTH", "owned_thread", "path_id", "user_of")

MAX_ID_LENGTH = 200
"""No stored id is longer."""


def user_of(request: Request, s: Services, *, write: bool = False) -> str:
    """The request's user (see `web.auth`); a write also takes a token from the user's rate-limit bucket."""
    user_id = authenticated_user(request)
    if write:
        s.limiter.check(user_id)
    return user_id


async def owned_thread(request: Request, s: Services, user_id: str) -> Thread:
    """The path's thread if `user_id` owns it; otherwise a 404, the same as for a missing one."""
    thread_id = path_id(request, "thread_id", "thread")
    try:
        return await s.db.threads.get(thread_id, user_id=user_id)
    except NotFound as error:
        raise ApiError.not_found(f"no thread {thread_id!r}") from error


def path_id(request: Request, name: str, what: str) -> str:
    """The path parameter `name`, an id of a `what`; one no stored id can be is a 404."""
    value = str(request.path_params[name])
    # No stored id is that long or holds a NUL (which PostgreSQL would refuse to even compare).
    if len(value) > MAX_ID_LENGTH or unstorable(value):
        raise ApiError.not_found(f"no {what} {value[:MAX_ID_LENGTH]!r}")
    return value
