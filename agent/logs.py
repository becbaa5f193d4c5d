"""Log records as operators see them: redacted, and stamped with the trace of the run they belong to.

Both are `logging.Filter`s meant for handlers (a filter on a logger would miss the records its
children propagate to the handler). `install_log_filters` puts them on every handler of the given
loggers; the command line calls it where it configures logging.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from opentelemetry import trace

from .redaction import redact, usable_secrets

__all__ = ("LOG_FORMAT", "RedactingFilter", "TraceIdFilter", "current_trace_id", "install_log_filters")

LOG_FORMAT = "%(levelname)s %(name)s: %(message)s%(trace_suffix)s"
"""The command line's log format: `trace_suffix` is ` trace_id=<32 hex digits>` inside a run, else empty."""


def current_trace_id() -> str | None:
    """The trace id of the current span as 32 hex digits, or `None` outside a recorded trace."""
    context = trace.get_current_span().get_span_context()
    return format(context.trace_id, "032x") if context.is_valid else None


class TraceIdFilter(logging.Filter):
    """Adds `trace_id` (32 hex digits, or `""`) and `trace_suffix` to every record; drops none."""

    def filter(self, record: logging.LogRecord) -> bool:
        # A record a previous handler stamped keeps its trace: a queue handler may run elsewhere.
        if not hasattr(record, "trace_id"):
            trace_id = current_trace_id() or ""
            record.trace_id = trace_id
            record.trace_suffix = f" trace_id={trace_id}" if trace_id else ""
        return True


class RedactingFilter(logging.Filter):
    """Masks secrets, e-mail addresses and card numbers in a record's message and traceback; drops none.

    The message is formatted once here (`msg % args`) and the arguments dropped, so no handler
    formats the unredacted arguments again; a traceback is formatted and redacted into `exc_text`,
    which formatters print instead of formatting `exc_info` themselves.
    """

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        super().__init__()
        self._secrets = usable_secrets(secrets)
        self._formatter = logging.Formatter()

    def filter(self, record: logging.LogRecord) -> bool:
        record.msg = redact(record.getMessage(), self._secrets)
        record.args = None
        if record.exc_info and not record.exc_text:
            record.exc_text = self._formatter.formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = redact(record.exc_text, self._secrets)
        if record.stack_info:
            record.stack_info = redact(record.stack_info, self._secrets)
        return True


def install_log_filters(secrets: Iterable[str] = (), *, loggers: Iterable[str] = ("",)) -> None:
    """Put a `TraceIdFilter` and a `RedactingFilter` on every handler of `loggers` (the root by default).

    Installing again replaces the filters this function installed before on those handlers.
    """
    secrets = usable_secrets(secrets)
    for name in loggers:
        for handler in logging.getLogger(name or None).handlers:
            for old in [f for f in handler.filters if isinstance(f, TraceIdFilter | RedactingFilter)]:
                handler.removeFilter(old)
            handler.addFilter(TraceIdFilter())
            handler.addFilter(RedactingFilter(secrets))
