"""The HTTP face of durable-chat: the Starlette application and the settings it runs with.

Each name is imported on first use (PEP 562), so that a command that only reads the settings or
signs a token does not import Starlette's application, the AG-UI models and pydantic-ai's agent.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .app import create_app, error_response
    from .auth import Authenticate
    from .errors import ApiError
    from .media import DEFAULT_MEDIA_TYPES, Sniffer, UnsupportedType, media_type_of, safe_name
    from .settings import Settings, SettingsError
    from .tokens import InvalidToken, issue_token, verify_token
    from .webhooks import WebhookSender

__all__ = (
    "DEFAULT_MEDIA_TYPES",
    "ApiError",
    "Authenticate",
    "InvalidToken",
    "Settings",
    "SettingsError",
    "Sniffer",
    "UnsupportedType",
    "WebhookSender",
    "create_app",
    "error_response",
    "issue_token",
    "media_type_of",
    "safe_name",
    "verify_token",
)

_EXPORTS = {
    "app": ("create_app", "error_response"),
    "auth": ("Authenticate",),
    "errors": ("ApiError",),
    "media": ("DEFAULT_MEDIA_TYPES", "Sniffer", "UnsupportedType", "media_type_of", "safe_name"),
    "settings": ("Settings", "SettingsError"),
    "tokens": ("InvalidToken", "issue_token", "verify_token"),
    "webhooks": ("WebhookSender",),
}
_MODULE_OF = {name: module for module, names in _EXPORTS.items() for name in names}


def __getattr__(name: str) -> object:
    if name not in _MODULE_OF:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    # The import statement's own path, which `python -X importtime` logs; `importlib.import_module`
    # would leave the module out of the log that start-up is measured with.
    module = __import__(_MODULE_OF[name], globals(), fromlist=(name,), level=1)
    value = globals()[name] = getattr(module, name)
    return value
