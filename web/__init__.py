"""The HTTP face of durable-chat: the Starlette application and the settings it runs with."""

from __future__ import annotations

from .app import create_app, error_response
from .auth import Authenticate
from .broker import Broker, SubscriberDropped, Subscription
from .errors import ApiError
from .runner import Runner
from .settings import Settings, SettingsError
from .tokens import InvalidToken, issue_token, verify_token

__all__ = (
    "ApiError",
    "Authenticate",
    "Broker",
    "InvalidToken",
    "Runner",
    "Settings",
    "SettingsError",
    "SubscriberDropped",
    "Subscription",
    "create_app",
    "error_response",
    "issue_token",
    "verify_token",
)
