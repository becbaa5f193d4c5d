"""The HTTP face of durable-chat: the Starlette application and the settings it runs with."""

from __future__ import annotations

from .app import create_app, error_response
from .settings import Settings, SettingsError

__all__ = ("Settings", "SettingsError", "create_app", "error_response")
