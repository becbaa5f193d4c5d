"""`Services`: what the handlers share for the life of the process, opened by the app's lifespan."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from starlette.requests import Request

from agent import ChatApp
from store import Database, EventListener
from worker import Broker, Relay, Runner

from .limits import RateLimiter, StreamLimiter
from .settings import Settings

__all__ = ("Services", "services")


@dataclass(frozen=True)
class Services:
    settings: Settings
    app: ChatApp[Any]
    """The app served."""
    db: Database
    broker: Broker
    runner: Runner
    limiter: RateLimiter
    streams: StreamLimiter
    relay: Relay | None = None
    """Relays events other processes store (PostgreSQL only)."""
    listener: EventListener | None = None
    """Listens for the notices of other processes' events, for the relay (PostgreSQL only)."""


def services(request: Request) -> Services:
    """The services of the application serving `request`."""
    found: object = getattr(request.app.state, "services", None)
    assert isinstance(found, Services), "the lifespan has not opened the services"
    return found
