"""Log records as operators see them: redacted, and stamped with the trace of the run they belong to.

Both are `logging.Filter`s meant for handlers (a filter on a logger would miss the records its
children propagate to the handler). `install_log_filters` puts them on every handler of the given
loggers; the command line calls it where it configures logging.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping

from opentelemetry import trace

from .redaction import redact, usable_secrets

__all__ = (
    "LOG_FORMAT",
    "RedactingFilter",
    "TraceIdFilter",
    "current_trace_id",
    "format_trace_id",
    "install_log_filters",
)

LOG_FORMAT = "%(levelname)s %(name)s: %(message)s%(trace_suffix)s"
"""The command line's log format: `trace_suffix` is ` trace_id=<32 hex digits>` inside a run, else empty."""


def current_trace_id() -> str | None:
    """The trace id of the current span as 32 hex digits, or `None` outside a recorded trace."""
    return format_trace_id(trace.get_current_span())


def format_trace_id(span: trace.Span) -> str | None:
    """The trace id of `span` as 32 hex digits, or `None` for a span of no trace (tracing is off)."""
    context = span.get_span_context()
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

    A clean message is left as it is. Otherwise the format string and the string arguments are
    redacted one by one, so formatters that read `args` themselves (uvicorn's access log) still
    work; if the message still is not clean (the text came from a number or an object), it is
    replaced by its redacted form and the arguments are dropped. A traceback is formatted and
    redacted into `exc_text`, which formatters print instead of formatting `exc_info` themselves.
    """

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        super().__init__()
        self._secrets = usable_secrets(secrets)
        self._formatter = logging.Formatter()

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        redacted = self._redact(message)
        if redacted != message:
            self._redact_parts(record)
            if self._redact(record.getMessage()) != record.getMessage():
                record.msg, record.args = redacted, None
        if record.exc_info and not record.exc_text:
            record.exc_text = self._formatter.formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = self._redact(record.exc_text)
        if record.stack_info:
            record.stack_info = self._redact(record.stack_info)
        return True

    def _redact(self, text: str) -> str:
        return redact(text, self._secrets)

    def _redact_parts(self, record: logging.LogRecord) -> None:
        if isinstance(record.msg, str):
            record.msg = self._redact(record.msg)
        args = record.args
        if isinstance(args, tuple):
            record.args = tuple(self._redact(a) if isinstance(a, str) else a for a in args)
        elif isinstance(args, Mapping):
            record.args = {k: self._redact(a) if isinstance(a, str) else a for k, a in args.items()}


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
