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
- **Sampled by default** (`sample_ratio`, `DURABLE_CHAT_TRACE_SAMPLE`, 0.1): every run and
  approval keeps its own span (one span a run: its id, status, attempt and, for a failed run, the
  exception), so a failure is never lost to sampling; the spans under it (the agent's model
  requests and tools, the store's operations) are recorded for the sampled traces only, chosen by
  trace id (`TraceIdRatioBased`), so all of a trace's spans are in or out together (`RunSampler`).
  True tail sampling (keep a whole trace if it failed) would mean recording every span of every
  run to decide at its end: the very cost sampling removes.
- **Off costs nothing but ids**: with no exporter the provider samples nothing (`ALWAYS_OFF`), so
  no span is recorded, yet runs, events and log lines still get trace ids to correlate by.
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
from opentelemetry.context import Context
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF, Decision, Sampler, SamplingResult, TraceIdRatioBased
from opentelemetry.trace import Link, SpanKind, Status, TraceState
from opentelemetry.util.types import AnyValue, Attributes
from pydantic_ai.capabilities.instrumentation import Instrumentation
from pydantic_ai.models.instrumented import InstrumentationSettings

from store import Run, record_store_spans

from .redaction import redact, usable_secrets
from .trace_file import DEFAULT_TRACE_FILES, DEFAULT_TRACE_MAX_BYTES, append_capped

__all__ = (
    "DEFAULT_SAMPLE_RATIO",
    "JsonlSpanExporter",
    "RedactingSpanExporter",
    "RunSampler",
    "TracingConfig",
    "TracingUnavailable",
    "instrumentation",
    "run_attributes",
    "setup_tracing",
    "span_record",
    "traces_children",
)

SERVICE_NAME = "durable-chat"
DEFAULT_SAMPLE_RATIO = 0.1
"""The share of runs traced in full by default; every run keeps its own span."""
TOP_SPANS = frozenset({"run", "approval"})
"""The spans always recorded, whatever the sample: one per run attempt and per decision."""
DETAILED_ATTRIBUTE = "durable_chat.trace.sampled"
"""On a top span: whether the spans under it were recorded too."""


class TracingUnavailable(Exception):
    """The configured tracing cannot be set up, e.g. OTLP without its exporter package."""


@dataclass(frozen=True, kw_only=True)
class TracingConfig:
    """How a process traces; built from the settings (`web.Settings.tracing`)."""

    trace_file: Path | None
    """The JSONL file spans are appended to; `None` writes no file."""
    trace_max_bytes: int | None = DEFAULT_TRACE_MAX_BYTES
    """The size past which the trace file is rotated; `None`: never (it grows without bound)."""
    trace_files: int = DEFAULT_TRACE_FILES
    """How many rotated trace files are kept besides the current one."""
    otlp_endpoint: str | None = None
    """An OTLP/HTTP collector URL (e.g. `http://localhost:4318/v1/traces`) to export to as well."""
    include_content: bool = False
    """Put prompts, completions, tool arguments and results in pydantic-ai's spans."""
    sample_ratio: float = DEFAULT_SAMPLE_RATIO
    """The share of traces recorded in full, 0 to 1; the others keep their top spans only."""
    store_spans: bool = False
    """A span per store operation (a claim, a load, a checkpoint) in the sampled traces."""
    secrets: tuple[str, ...] = field(default=(), repr=False)
    """Values redacted from spans (and logs) wherever they occur."""

    @property
    def exports(self) -> bool:
        """Whether spans go anywhere: without an exporter none is recorded."""
        return self.trace_file is not None or self.otlp_endpoint is not None


def instrumentation(*, include_content: bool = False) -> Instrumentation:
    """The pydantic-ai capability that traces an agent's runs, model requests and tool calls.

    It uses the global tracer provider, so its spans are children of the current span (the run's).
    Build it once per process (`agent.Runtime` does): each build creates metric instruments on the
    global meter that are never freed.
    """
    # A file's bytes never go into a span, even with content on: a span is no place for a user's photo.
    return Instrumentation(
        settings=InstrumentationSettings(include_content=include_content, include_binary_content=False)
    )


class RunSampler(Sampler):
    """Top spans (`run`, `approval`) always; the spans under them for `ratio` of the traces, by trace id.

    A remote parent's decision is followed, as `ParentBased` does; the approval span's placeholder
    parent is remote and marked sampled, so decisions are always kept too.
    """

    def __init__(self, ratio: float) -> None:
        if not 0.0 <= ratio <= 1.0:
            raise ValueError(f"a sample ratio is between 0 and 1, not {ratio!r}")
        self.ratio = ratio
        self._by_trace_id = TraceIdRatioBased(ratio)

    def should_sample(
        self,
        parent_context: Context | None,
        trace_id: int,
        name: str,
        kind: SpanKind | None = None,
        attributes: Attributes = None,
        links: Sequence[Link] | None = None,
        trace_state: TraceState | None = None,
    ) -> SamplingResult:
        parent = trace.get_current_span(parent_context).get_span_context()
        if name in TOP_SPANS and (not parent.is_valid or parent.is_remote):
            sampled = self._by_trace_id.should_sample(None, trace_id, name).decision.is_sampled()
            return SamplingResult(
                Decision.RECORD_AND_SAMPLE, {**(attributes or {}), DETAILED_ATTRIBUTE: sampled}, trace_state
            )
        if parent.is_valid and (parent.is_remote or not parent.trace_flags.sampled):
            decision = Decision.RECORD_AND_SAMPLE if parent.trace_flags.sampled else Decision.DROP
            return SamplingResult(decision, attributes if decision.is_sampled() else None, trace_state)
        return self._by_trace_id.should_sample(
            parent_context, trace_id, name, kind, attributes, links, trace_state
        )

    def get_description(self) -> str:
        return f"RunSampler{{{self.ratio}}}"


def traces_children(span: trace.Span, provider: trace.TracerProvider | None = None) -> bool:
    """Whether spans started under `span` are recorded by `provider` (the global one by default):
    its trace is sampled in full."""
    provider = trace.get_tracer_provider() if provider is None else provider
    if not span.is_recording() or not isinstance(provider, TracerProvider):
        return False
    context = span.get_span_context()
    probe = provider.sampler.should_sample(trace.set_span_in_context(span), context.trace_id, "probe")
    return probe.decision.is_sampled()


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

    With no exporter it records nothing but still hands out trace ids (see the module's notes).

    Raises:
        TracingUnavailable: OTLP is configured but its exporter package is not installed.
    """
    exporters: list[SpanExporter] = []
    if config.trace_file is not None:
        exporters.append(
            JsonlSpanExporter(config.trace_file, max_bytes=config.trace_max_bytes, keep=config.trace_files)
        )
    if config.otlp_endpoint is not None:
        exporters.append(_otlp_exporter(config.otlp_endpoint))
    sampler = RunSampler(config.sample_ratio) if exporters else ALWAYS_OFF
    provider = TracerProvider(sampler=sampler, resource=Resource.create({"service.name": SERVICE_NAME}))
    record_store_spans(config.store_spans and bool(exporters))
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
    """Appends each span as one JSON line (`span_record`) to a file, creating its folder, rotating
    it past `max_bytes` and keeping `keep` earlier files (`agent.trace_file`)."""

    def __init__(
        self, path: Path, *, max_bytes: int | None = DEFAULT_TRACE_MAX_BYTES, keep: int = DEFAULT_TRACE_FILES
    ) -> None:
        self.path = path
        self.max_bytes = max_bytes
        self.keep = keep
        self._lock = threading.Lock()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        lines = "".join(json.dumps(span_record(span), separators=(",", ":")) + "\n" for span in spans)
        try:
            with self._lock:
                append_capped(self.path, lines, max_bytes=self.max_bytes, keep=self.keep)
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
