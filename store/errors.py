"""The data layer's errors: one small hierarchy, raised instead of SQLAlchemy's or the drivers'."""

from __future__ import annotations

__all__ = (
    "AlreadyDecided",
    "ApprovalPending",
    "Conflict",
    "CorruptData",
    "DatabaseUnavailable",
    "LeaseLost",
    "NoActiveRun",
    "NotFound",
    "RunActive",
    "RunChanged",
    "SchemaTooNew",
    "StoreError",
    "UnsupportedDatabase",
)


class StoreError(Exception):
    """Base class of every error the data layer raises."""


class NotFound(StoreError, LookupError):
    """A row the caller named is not stored (or is not visible to the caller's scope)."""


class Conflict(StoreError):
    """The change conflicts with what is stored: a duplicate key or a stale revision."""

    code: str = "conflict"
    """A snake_case name of the conflict, for APIs to pass on."""


class RunActive(Conflict):
    """The thread already has a run queued or running."""

    code = "run_active"


class ApprovalPending(Conflict):
    """The thread waits for decisions on tool calls before it can take a new message."""

    code = "approval_pending"


class AlreadyDecided(Conflict):
    """The tool call was given the opposite decision already."""

    code = "already_decided"


class NoActiveRun(Conflict):
    """The thread has no run queued or running to cancel."""

    code = "no_active_run"


class RunChanged(Conflict):
    """The run ended, or stored more of itself, while it was being cancelled: read it again."""

    code = "run_changed"


class CallsHeld(Conflict):
    """A pause's checkpoint stored nothing: a call it holds has an approval in the thread already."""

    code = "calls_held"


class LeaseLost(StoreError):
    """This worker no longer holds the run's lease: another worker took the run over.

    Whatever the write was (a checkpoint, the run's end), it did not happen; the worker must
    stop driving the run and leave it to its new owner.
    """


class CorruptData(StoreError):
    """A stored row cannot be decoded; the message names the row."""


class SchemaTooNew(StoreError):
    """The database was upgraded by a newer version of durable-chat than this one."""


class DatabaseUnavailable(StoreError):
    """The database cannot be reached, or the connection to it broke."""


class UnsupportedDatabase(StoreError, ValueError):
    """The database URL names a dialect or driver durable-chat does not support."""
