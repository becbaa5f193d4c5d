"""The Starlette application: its routes, its lifespan and its JSON error shape."""

from __future__ import annotations

import logging
from collections.abc import AsyncGenerator, Mapping
from contextlib import asynccontextmanager
from datetime import timedelta
from http import HTTPStatus
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import ClientDisconnect, Request
from starlette.responses import FileResponse, JSONResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from agent import ChatApp, load_app, open_runtime
from store import Conflict, Database, DatabaseUnavailable, EventListener, Worker, normalize_url
from worker import Broker, Deadlines, Relay, Runner

from .ag_ui.endpoints import ag_ui_routes
from .ai_sdk.endpoints import ai_sdk_routes
from .api import api_routes
from .auth import Authenticate, Authentication, Verifier, builtin_tokens, custom
from .errors import ApiError
from .files import file_routes
from .headers import SecurityHeaders
from .identity import jwt_tokens
from .limits import RateLimiter, StreamLimiter
from .regenerate import regenerate_routes
from .review import review_routes
from .services import Services
from .settings import Settings
from .sse import sse_routes
from .webhooks import WebhookSender

__all__ = ("create_app", "error_response")

logger = logging.getLogger(__name__)


STATIC_DIR = Path(__file__).resolve().parent / "static"


def create_app(
    settings: Settings, app: ChatApp[Any] | None = None, *, authenticate: Authenticate | None = None
) -> Starlette:
    """The application serving `app` (by default the one `settings.app` names) with `settings`.

    `authenticate`, when given, signs requests in instead of the tokens (see `web.auth`).

    Its lifespan opens the runtime (`agent.open_runtime`: the database, the app's setup hook)
    publishing to the in-process broker, starts (on PostgreSQL) the listener that relays events
    other processes store, and starts the runner, which first takes over the runs nobody drives
    (left by a dead process), then heartbeats its leases and sweeps for more. At shutdown the
    runner stops its in-flight runs (they requeue themselves), waits for them, bounded, and
    releases its leases before the database closes.

    Raises:
        agent.AppLoadError: `app` is not given and `settings.app` names no app.
    """
    served = load_app(settings.app) if app is None else app

    @asynccontextmanager
    async def lifespan(starlette: Starlette) -> AsyncGenerator[None]:
        worker = Worker(lease=timedelta(seconds=settings.lease_seconds))
        broker = Broker()
        options = settings.runtime_options(worker)
        async with open_runtime(
            served, settings.database_url, options=options, publish=broker.publish
        ) as runtime:
            db = runtime.db
            await db.files.collect()  # what a crash left (see docs/files.md)
            relay, listener = _relay(settings, db, broker)
            runner = Runner(
                runtime,
                # A quarter of the bound each to reach a checkpoint and to stop once cancelled.
                shutdown_timeout=settings.shutdown_timeout_seconds / 4,
                max_concurrent=settings.max_runs,
                heartbeat_seconds=settings.heartbeat_seconds,
                sweep_seconds=settings.sweep_seconds,
                replay_window=(
                    timedelta(seconds=settings.event_replay_seconds)
                    if settings.event_replay_seconds
                    else None
                ),
            )
            starlette.state.settings = settings
            starlette.state.services = Services(
                settings=settings,
                app=served,
                db=db,
                broker=broker,
                runner=runner,
                limiter=RateLimiter(
                    burst=settings.rate_limit_burst, per_second=settings.rate_limit_per_second
                ),
                streams=StreamLimiter(per_user=settings.max_streams_per_user),
                relay=relay,
                listener=listener,
            )
            if listener is not None:
                listener.start()
            await runner.start()
            deadlines = Deadlines(
                db, runner, publish=broker.publish, poll_seconds=settings.deadline_poll_seconds
            )
            await deadlines.start()
            sender = None
            if settings.webhook_urls and settings.webhook_secret is not None:
                sender = WebhookSender(db, settings.webhook_urls, settings.webhook_secret)
                await sender.start()
            try:
                yield
            finally:
                if sender is not None:
                    await sender.aclose()
                await deadlines.aclose()
                await runner.aclose()
                if listener is not None:
                    await listener.aclose()
                if relay is not None:
                    await relay.aclose()

    return Starlette(
        routes=[
            Route("/healthz", healthz, methods=["GET"]),
            Route("/", page, methods=["GET"]),
            Route("/review", review_page, methods=["GET"]),
            *api_routes(),
            *file_routes(),
            *regenerate_routes(),
            *sse_routes(),
            *review_routes(),
            *ai_sdk_routes(),
            *ag_ui_routes(),
            Mount("/static", StaticFiles(directory=STATIC_DIR, check_dir=False), name="static"),
        ],
        middleware=[
            Middleware(SecurityHeaders),
            Middleware(Authentication, verify=_verifier(settings, authenticate)),
        ],
        exception_handlers={
            ApiError: _api_error,
            ClientDisconnect: _client_disconnected,
            Conflict: _conflict,
            DatabaseUnavailable: _database_unavailable,
            HTTPException: _http_error,
            Exception: _server_error,
        },
        lifespan=lifespan,
    )


def _verifier(settings: Settings, authenticate: Authenticate | None) -> Verifier:
    """Your callable, else the identity provider's JWTs when configured, else the built-in tokens."""
    if authenticate is not None:
        return custom(authenticate)
    if settings.jwt is not None:
        return jwt_tokens(settings.jwt)
    return builtin_tokens(settings.secret)


def _relay(settings: Settings, db: Database, broker: Broker) -> tuple[Relay | None, EventListener | None]:
    """On PostgreSQL, the relay of other processes' events and the listener that feeds it."""
    if db.engine.dialect.name != "postgresql":
        return None, None
    relay = Relay(db.events, broker)
    url = db.engine.url if settings.listen_url is None else normalize_url(settings.listen_url)
    listener = EventListener(url, on_notice=relay.notice, on_connected=relay.catch_up)
    return relay, listener


async def page(request: Request) -> Response:
    """`GET /`: the browser page."""
    index = STATIC_DIR / "index.html"
    if not index.is_file():
        return error_response(404, "not_found", "the browser page is not installed")
    return FileResponse(index, media_type="text/html")


async def review_page(request: Request) -> Response:
    """`GET /review`: the reviewers' page (its data is under `/api/review/`, for tokens with roles)."""
    review = STATIC_DIR / "review.html"
    if not review.is_file():
        return error_response(404, "not_found", "the review page is not installed")
    return FileResponse(review, media_type="text/html")


async def healthz(request: Request) -> Response:
    """`GET /healthz`: the process is up and serving."""
    return JSONResponse({"status": "ok"})


def error_response(
    status_code: int,
    code: str,
    message: str,
    headers: Mapping[str, str] | None = None,
    *,
    details: list[dict[str, object]] | None = None,
) -> JSONResponse:
    """The API's error body, `{"error": {"code": ..., "message": ...}}` (and `details`, when given)."""
    error: dict[str, object] = {"code": code, "message": message}
    if details is not None:
        error["details"] = details
    return JSONResponse({"error": error}, status_code=status_code, headers=headers)


async def _api_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ApiError)
    return error_response(exc.status_code, exc.code, exc.message, exc.headers, details=exc.details)


async def _conflict(request: Request, exc: Exception) -> Response:
    # What the store refuses as conflicting with the state it holds (a run already active, a call
    # decided the other way): 409 with the store's own code, wherever in a handler it is raised.
    assert isinstance(exc, Conflict)
    return error_response(409, exc.code, str(exc))


async def _database_unavailable(request: Request, exc: Exception) -> Response:
    return error_response(
        503, "database_unavailable", "the database cannot be reached; try again", {"Retry-After": "5"}
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


async def _client_disconnected(request: Request, exc: Exception) -> Response:
    # The client hung up while sending its body: nobody reads this answer, and anyone can cause it
    # at will, so one INFO line, no traceback.
    logger.info("a client hung up before sending its whole body: %s %s", request.method, request.url.path)
    return error_response(400, "client_disconnected", "the request body was cut off")


async def _server_error(request: Request, exc: Exception) -> Response:
    # Uvicorn logs the traceback; the client gets the same JSON shape as every other error.
    return error_response(500, "internal_error", "the server hit an unexpected error")
