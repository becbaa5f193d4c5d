"""OpenTelemetry tracing: the tracer provider, its exporters and the redaction applied before export.

The code of every package speaks the OpenTelemetry API only (`opentelemetry.trace.get_tracer`); a
process that wants its spans calls `setup_tracing` once, at start, which installs the SDK's
tracer provider globally. Without it every span is a no-op and runs carry no trace id.
Deliberate choices:

- **JSONL by default**: one finished span per line (`span_record`), appended to a file in the
  data directory, readable with `durable-chat trace RUN_ID` or any JSON tool, no collector needed.
  Spans are batched and written by a background thread, within a second or so of ending.
- **OTLP when configured** (`otlp_endpoint`), over HTTP/protobuf, in addition to the file. Its
  exporter package is an optional extra (`pip install 'durable-chat[otlp]'`): it brings protobuf
  and requests, which a default install has no use for; without it `setup_tracing` fails with one
  clear line instead of silently exporting nothing.
- **Redaction before export**: every exporter is wrapped in `RedactingSpanExporter`, which masks
  secrets, e-mail addresses and card numbers in span names, string attributes, event attributes
  and status messages (`agent.redaction`). Prompts and completions are left out of pydantic-ai's
  spans unless `include_content` is set (`instrumentation`).
"""

from __future__ import annotations

import importlib
import json
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.trace import Status
from opentelemetry.util.types import AnyValue, Attributes
from pydantic_ai.capabilities.instrumentation import Instrumentation
from pydantic_ai.models.instrumented import InstrumentationSettings

from store import Run

from .redaction import redact, usable_secrets

__all__ = (
    "JsonlSpanExporter",
    "RedactingSpanExporter",
    "TracingConfig",
    "TracingUnavailable",
    "instrumentation",
    "run_attributes",
    "setup_tracing",
    "span_record",
)

SERVICE_NAME = "durable-chat"


class TracingUnavailable(Exception):
    """The configured tracing cannot be set up, e.g. OTLP without its exporter package."""


@dataclass(frozen=True, kw_only=True)
class TracingConfig:
    """How a process traces; built from the settings (`web.Settings.tracing`)."""

    trace_file: Path | None
    """The JSONL file spans are appended to; `None` writes no file."""
    otlp_endpoint: str | None = None
    """An OTLP/HTTP collector URL (e.g. `http://localhost:4318/v1/traces`) to export to as well."""
    include_content: bool = False
    """Put prompts, completions, tool arguments and results in pydantic-ai's spans."""
    secrets: tuple[str, ...] = field(default=(), repr=False)
    """Values redacted from spans (and logs) wherever they occur."""


def instrumentation(*, include_content: bool = False) -> Instrumentation:
    """The pydantic-ai capability that traces an agent's runs, model requests and tool calls.

    It uses the global tracer provider, so its spans are children of the current span (the run's).
    """
    return Instrumentation(settings=InstrumentationSettings(include_content=include_content))


def run_attributes(run_id: str, run: Run | None = None) -> dict[str, AnyValue]:
    """The attributes of a run's span: its id at the start, and what its row tells once it started."""
    if run is None:
        return {"durable_chat.run_id": run_id, "durable_chat.run.started": False}
    return {
        "durable_chat.thread_id": run.thread_id,
        "durable_chat.run.kind": run.kind,
        "durable_chat.run.attempt": run.attempt,
        "durable_chat.run.started": True,
    }


def setup_tracing(config: TracingConfig) -> TracerProvider:
    """Install a tracer provider exporting as `config` says; call `shutdown()` on it at exit.

    Raises:
        TracingUnavailable: OTLP is configured but its exporter package is not installed.
    """
    exporters: list[SpanExporter] = []
    if config.trace_file is not None:
        exporters.append(JsonlSpanExporter(config.trace_file))
    if config.otlp_endpoint is not None:
        exporters.append(_otlp_exporter(config.otlp_endpoint))
    provider = TracerProvider(resource=Resource.create({"service.name": SERVICE_NAME}))
    for exporter in exporters:
        provider.add_span_processor(
            BatchSpanProcessor(RedactingSpanExporter(exporter, config.secrets), schedule_delay_millis=1000)
        )
    trace.set_tracer_provider(provider)
    return provider


def _otlp_exporter(endpoint: str) -> SpanExporter:
    try:
        # Imported by name: the package is an optional extra, absent from a default install.
        module = importlib.import_module("opentelemetry.exporter.otlp.proto.http.trace_exporter")
    except ImportError as error:
        raise TracingUnavailable(
            f"OTLP export to {endpoint!r} needs the OTLP exporter: pip install 'durable-chat[otlp]'"
        ) from error
    exporter: SpanExporter = module.OTLPSpanExporter(endpoint=endpoint)
    return exporter


class RedactingSpanExporter(SpanExporter):
    """Passes spans to `inner` with secrets, e-mail addresses and card numbers masked."""

    def __init__(self, inner: SpanExporter, secrets: Iterable[str] = ()) -> None:
        self.inner = inner
        self._secrets = usable_secrets(secrets)

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return self.inner.export([self._redacted(span) for span in spans])

    def shutdown(self) -> None:
        self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self.inner.force_flush(timeout_millis)

    def _redacted(self, span: ReadableSpan) -> ReadableSpan:
        status = span.status
        if status.description:
            status = Status(status.status_code, redact(status.description, self._secrets))
        return ReadableSpan(
            name=redact(span.name, self._secrets),
            context=span.context,
            parent=span.parent,
            resource=span.resource,
            attributes=self._attributes(span.attributes),
            events=[
                Event(event.name, self._attributes(event.attributes), event.timestamp)
                for event in span.events
            ],
            links=span.links,
            kind=span.kind,
            status=status,
            start_time=span.start_time,
            end_time=span.end_time,
            instrumentation_scope=span.instrumentation_scope,
        )

    def _attributes(self, attributes: Attributes) -> dict[str, AnyValue]:
        return {key: self._value(value) for key, value in (attributes or {}).items()}

    def _value(self, value: AnyValue) -> AnyValue:
        if isinstance(value, str):
            return redact(value, self._secrets)
        if isinstance(value, Mapping):
            return {key: self._value(item) for key, item in value.items()}
        if isinstance(value, Sequence) and not isinstance(value, bytes):
            return tuple(self._value(item) for item in value)
        return value


class JsonlSpanExporter(SpanExporter):
    """Appends each span as one JSON line (`span_record`) to a file, creating its folder."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        lines = "".join(json.dumps(span_record(span), separators=(",", ":")) + "\n" for span in spans)
        try:
            with self._lock:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                # One write per batch in append mode: lines of concurrent processes do not interleave.
                with self.path.open("a", encoding="utf-8") as file:
                    file.write(lines)
        except OSError:
            return SpanExportResult.FAILURE
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        """Nothing to release: the file is opened per batch."""

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True


def span_record(span: ReadableSpan) -> dict[str, object]:
    """A finished span as the JSON object of one line of the trace file; ids as lower-case hex."""
    context = span.context
    assert context is not None, "a finished span has a context"
    return {
        "name": span.name,
        "trace_id": format(context.trace_id, "032x"),
        "span_id": format(context.span_id, "016x"),
        "parent_span_id": None if span.parent is None else format(span.parent.span_id, "016x"),
        "kind": span.kind.name,
        "start_time_unix_nano": span.start_time,
        "end_time_unix_nano": span.end_time,
        "status": span.status.status_code.name,
        "status_message": span.status.description,
        "attributes": dict(span.attributes or {}),
        "events": [
            {"name": e.name, "time_unix_nano": e.timestamp, "attributes": dict(e.attributes or {})}
            for e in span.events
        ],
        "links": [
            {
                "trace_id": format(link.context.trace_id, "032x"),
                "span_id": format(link.context.span_id, "016x"),
            }
            for link in span.links
        ],
        "scope": None if span.instrumentation_scope is None else span.instrumentation_scope.name,
    }
