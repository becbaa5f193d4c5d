"""The span exporters: redaction before export, the JSONL file, OTLP to a collector, and OTLP without its extra."""

from __future__ import annotations

import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import ClassVar

import pytest
from dirty_equals import IsInt, IsStr
from inline_snapshot import snapshot
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Link, SpanKind, StatusCode

from agent.tracing import (
    JsonlSpanExporter,
    RedactingSpanExporter,
    TracingConfig,
    TracingUnavailable,
    setup_tracing,
    span_record,
)


def local_provider(
    *exporters: InMemorySpanExporter | JsonlSpanExporter, secrets: list[str]
) -> TracerProvider:
    """A provider of the test's own, beside the session's global one, exporting redacted spans."""
    provider = TracerProvider()
    for exporter in exporters:
        provider.add_span_processor(SimpleSpanProcessor(RedactingSpanExporter(exporter, secrets)))
    return provider


def test_every_text_of_a_span_is_redacted_before_export() -> None:
    memory = InMemorySpanExporter()
    tracer = local_provider(memory, secrets=["api-key-0123456789"]).get_tracer("test")

    with tracer.start_as_current_span(
        "lookup for bob@example.com",
        attributes={
            "query": "card 4111-1111-1111-1111 of bob@example.com",
            "keys": ["api-key-0123456789", "kept"],
            "count": 4111111111111111,
            "ok": True,
        },
    ) as span:
        span.add_event("retry", {"reason": "api-key-0123456789 refused", "attempt": 2})
        span.set_status(StatusCode.ERROR, "bob@example.com is unknown")

    [exported] = memory.get_finished_spans()
    assert exported.name == "lookup for [email]"
    assert dict(exported.attributes or {}) == {
        "query": "card [card] of [email]",
        "keys": ("[secret]", "kept"),
        "count": 4111111111111111,  # numbers stay numbers: only text is redacted
        "ok": True,
    }
    assert [(e.name, dict(e.attributes or {})) for e in exported.events] == [
        ("retry", {"reason": "[secret] refused", "attempt": 2})
    ]
    assert exported.status.description == "[email] is unknown"


def test_the_jsonl_file_holds_one_span_per_line(tmp_path: Path) -> None:
    path = tmp_path / "nested" / "traces.jsonl"
    tracer = local_provider(JsonlSpanExporter(path), secrets=[]).get_tracer("durable_chat.test")

    with tracer.start_as_current_span("parent", kind=SpanKind.SERVER) as parent:
        with tracer.start_as_current_span("child", attributes={"who": "a@b.example", "n": 3}):
            pass
        with tracer.start_as_current_span("linked", links=[Link(parent.get_span_context())]):
            pass

    records = [json.loads(line) for line in path.read_text().splitlines()]
    assert [record["name"] for record in records] == ["child", "linked", "parent"]
    child, linked, root = records
    hex16, hex32 = IsStr(regex=r"[0-9a-f]{16}"), IsStr(regex=r"[0-9a-f]{32}")
    assert child == snapshot(
        {
            "name": "child",
            "trace_id": hex32,
            "span_id": hex16,
            "parent_span_id": hex16,
            "kind": "INTERNAL",
            "start_time_unix_nano": IsInt(),
            "end_time_unix_nano": IsInt(),
            "status": "UNSET",
            "status_message": None,
            "attributes": {"who": "[email]", "n": 3},
            "events": [],
            "links": [],
            "scope": "durable_chat.test",
        }
    )
    assert child["parent_span_id"] == root["span_id"]
    assert root["parent_span_id"] is None
    assert root["kind"] == "SERVER"
    assert linked["links"] == [{"trace_id": root["trace_id"], "span_id": root["span_id"]}]
    assert child["end_time_unix_nano"] >= child["start_time_unix_nano"]


def test_span_record_of_an_exported_span_reads_as_json() -> None:
    memory = InMemorySpanExporter()
    with (
        local_provider(memory, secrets=[])
        .get_tracer("t")
        .start_as_current_span("s", attributes={"xs": [1, 2]})
    ):
        pass

    [span] = memory.get_finished_spans()
    assert json.loads(json.dumps(span_record(span)))["attributes"] == {"xs": [1, 2]}


def test_otlp_without_its_exporter_package_is_one_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    # A module set to None in sys.modules cannot be imported: as if the extra were not installed.
    monkeypatch.setitem(sys.modules, "opentelemetry.exporter.otlp.proto.http.trace_exporter", None)

    with pytest.raises(TracingUnavailable) as raised:
        setup_tracing(TracingConfig(trace_file=None, otlp_endpoint="http://collector:4318/v1/traces"))

    assert str(raised.value) == snapshot(
        "OTLP export to 'http://collector:4318/v1/traces' needs the OTLP exporter: pip install 'durable-chat[otlp]'"
    )


class _Collector(BaseHTTPRequestHandler):
    """An OTLP/HTTP collector: keeps each request's path, content type and body."""

    received: ClassVar[list[tuple[str, str, bytes]]] = []

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self.received.append((self.path, self.headers["Content-Type"], body))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        """Quiet: the test reads what arrived."""


def test_spans_reach_an_otlp_collector_redacted() -> None:
    collector = ThreadingHTTPServer(("127.0.0.1", 0), _Collector)
    serving = threading.Thread(target=collector.serve_forever, daemon=True)
    serving.start()
    try:
        endpoint = f"http://127.0.0.1:{collector.server_port}/v1/traces"
        provider = setup_tracing(
            TracingConfig(
                trace_file=None, otlp_endpoint=endpoint, sample_ratio=1.0, secrets=("hunter2-secret",)
            )
        )
        note = "mail bob@example.com, key hunter2-secret, card 4111 1111 1111 1111"
        with provider.get_tracer("test").start_as_current_span("otlp-check", attributes={"note": note}):
            pass
        assert provider.force_flush()
        provider.shutdown()
    finally:
        collector.shutdown()
        collector.server_close()

    [(path, content_type, body)] = _Collector.received
    assert (path, content_type) == ("/v1/traces", "application/x-protobuf")
    request = ExportTraceServiceRequest.FromString(body)
    [resource_spans] = request.resource_spans
    service = {a.key: a.value.string_value for a in resource_spans.resource.attributes}["service.name"]
    assert service == "durable-chat"
    [span] = [span for scope in resource_spans.scope_spans for span in scope.spans]
    assert span.name == "otlp-check"
    exported = {a.key: a.value.string_value for a in span.attributes}["note"]
    assert exported.startswith("mail ")
    for secret in ("bob@example.com", "hunter2-secret", "4111 1111 1111 1111"):
        assert secret not in exported
