"""The Starlette application: its routes, its lifespan and its JSON error shape."""

from __future__ import annotations

from collections.abc import AsyncGenerator, Mapping
from contextlib import asynccontextmanager
from http import HTTPStatus

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from store import SqlConversationStore

from .settings import Settings

__all__ = ("create_app", "error_response")


def create_app(settings: Settings) -> Starlette:
    """The application for `settings`; it opens the store on startup and closes it on shutdown."""

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncGenerator[None]:
        store = await SqlConversationStore.connect(settings.database_url)
        app.state.settings = settings
        app.state.store = store
        try:
            yield
        finally:
            await store.aclose()

    return Starlette(
        routes=[Route("/healthz", healthz, methods=["GET"])],
        exception_handlers={HTTPException: _http_error, Exception: _server_error},
        lifespan=lifespan,
    )


async def healthz(request: Request) -> Response:
    """`GET /healthz`: the process is up and serving."""
    return JSONResponse({"status": "ok"})


def error_response(
    status_code: int, code: str, message: str, headers: Mapping[str, str] | None = None
) -> JSONResponse:
    """The API's error body, `{"error": {"code": ..., "message": ...}}`."""
    return JSONResponse(
        {"error": {"code": code, "message": message}}, status_code=status_code, headers=headers
    )


async def _http_error(request: Request, exc: Exception) -> Response:
    # Starlette's handler type takes any Exception; it only routes HTTPException here.
    assert isinstance(exc, HTTPException)
    method, path = request.method, request.url.path
    match exc.status_code:
        case 404:
            code, message = "not_found", f"nothing at {path!r}"
        case 405:
            code, message = "method_not_allowed", f"{method} is not allowed on {path!r}"
        case status:
            code, message = _snake_case_phrase(status), exc.detail
    return error_response(exc.status_code, code, message, exc.headers)


def _snake_case_phrase(status_code: int) -> str:
    try:
        phrase = HTTPStatus(status_code).phrase
    except ValueError:
        return "error"
    return phrase.lower().replace(" ", "_").replace("-", "_")


async def _server_error(request: Request, exc: Exception) -> Response:
    # Uvicorn logs the traceback; the client gets the same JSON shape as every other error.
    return error_response(500, "internal_error", "the server hit an unexpected error")
