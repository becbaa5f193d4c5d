"""`ApiError`: an error the API answers with its own status and code, raised anywhere in a handler."""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ("ApiError",)


class ApiError(Exception):
    """Answered as `{"error": {"code": ..., "message": ...}}` with `status_code` (see `web.app`)."""

    def __init__(
        self,
        status_code: int,
        code: str,
        message: str,
        *,
        headers: Mapping[str, str] | None = None,
        details: list[dict[str, object]] | None = None,
    ) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.code = code
        self.message = message
        self.headers = headers
        self.details = details
        """Machine-readable details, e.g. which fields failed validation; added to the body's `error`."""

    @classmethod
    def not_found(cls, message: str) -> ApiError:
        return cls(404, "not_found", message)
