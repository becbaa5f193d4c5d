"""Sampling: every run keeps its own span, the spans under it only in sampled traces; off records nothing."""

from __future__ import annotations

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF

from agent import RunSampler, RuntimeOptions, TracingConfig, setup_tracing
from agent.tracing import traces_children
from store import recording_store_spans

from .core_app import CoreFactory
from .scripted import Script
from .step_app import App


def provider_sampling(ratio: float) -> tuple[TracerProvider, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider(sampler=RunSampler(ratio))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, exporter


def run_with_a_child(provider: TracerProvider) -> None:
    tracer = provider.get_tracer("test")
    with (
        tracer.start_as_current_span("run"),
        tracer.start_as_current_span("chat demo"),
        tracer.start_as_current_span("execute_tool lookup"),
    ):
        pass


def test_outside_the_sample_a_run_keeps_its_own_span_only() -> None:
    provider, exporter = provider_sampling(0.0)
    for _ in range(20):
        run_with_a_child(provider)
    spans = exporter.get_finished_spans()
    assert [span.name for span in spans] == ["run"] * 20
    assert {(span.attributes or {}).get("durable_chat.trace.sampled") for span in spans} == {False}


def test_a_sampled_run_is_traced_in_full() -> None:
    provider, exporter = provider_sampling(1.0)
    run_with_a_child(provider)
    assert [span.name for span in exporter.get_finished_spans()] == [
        "execute_tool lookup",
        "chat demo",
        "run",
    ]
    [run] = [span for span in exporter.get_finished_spans() if span.name == "run"]
    assert (run.attributes or {})["durable_chat.trace.sampled"] is True


def test_a_trace_is_in_or_out_as_a_whole_at_the_configured_share() -> None:
    provider, exporter = provider_sampling(0.25)
    for _ in range(400):
        run_with_a_child(provider)
    spans = exporter.get_finished_spans()
    runs = [span for span in spans if span.name == "run"]
    assert len(runs) == 400
    sampled = {
        span.context.trace_id for span in runs if (span.attributes or {})["durable_chat.trace.sampled"]
    }
    children = [span for span in spans if span.name != "run"]
    # Children come in whole traces: both of them, for exactly the runs marked sampled.
    assert len(children) == 2 * len(sampled)
    assert {span.context.trace_id for span in children} == sampled
    assert 40 <= len(sampled) <= 160  # 100 expected; the bounds only catch a sampler that ignores the ratio


def test_a_sample_ratio_out_of_range_is_refused() -> None:
    with pytest.raises(ValueError, match="between 0 and 1"):
        RunSampler(1.5)


def test_without_an_exporter_nothing_is_recorded_but_trace_ids_exist() -> None:
    provider = setup_tracing(TracingConfig(trace_file=None, store_spans=True))
    try:
        assert provider.sampler is ALWAYS_OFF
        assert not recording_store_spans()  # nothing to export them to
        with provider.get_tracer("test").start_as_current_span("run") as span:
            assert not span.is_recording()
            assert span.get_span_context().is_valid  # runs, events and log lines still get a trace id
    finally:
        provider.shutdown()


@pytest.mark.anyio
async def test_the_agents_instrumentation_is_built_once_per_runtime(core_factory: CoreFactory) -> None:
    # Each build creates metric instruments on the global meter that are never freed.
    app = await core_factory(Script(["hi"]))
    tracer = trace.get_tracer("test")  # the session's provider records every span
    with tracer.start_as_current_span("run"):
        first, second = app.runtime.agent_tracing(), app.runtime.agent_tracing()
    assert len(first) == 1
    assert first[0] is second[0] is app.runtime.instrumentation


@pytest.mark.anyio
async def test_a_run_outside_the_sample_or_untraced_gets_no_instrumentation(
    core_factory: CoreFactory,
) -> None:
    traced = await core_factory(Script(["hi"]))
    untraced = await core_factory(Script(["hi"]), options=RuntimeOptions(trace_agent=False))
    assert untraced.runtime.instrumentation is None
    with trace.get_tracer("test").start_as_current_span("run"):
        assert untraced.runtime.agent_tracing() == []
    # An unsampled trace's run span does not record: nothing under it would, so nothing is added.
    assert traced.runtime.agent_tracing() == []  # no current span at all

    outside, _ = provider_sampling(0.0)
    inside, _ = provider_sampling(1.0)
    with outside.get_tracer("test").start_as_current_span("run") as span:
        assert span.is_recording()  # the run's own span is always kept...
        assert not traces_children(span, outside)  # ...but the agent's would not be
    with inside.get_tracer("test").start_as_current_span("run") as span:
        assert traces_children(span, inside)


@pytest.mark.anyio
async def test_store_operations_get_no_span_by_default(
    core_factory: CoreFactory, spans: InMemorySpanExporter
) -> None:
    app = App((await core_factory(Script(["hi"]))).runtime)
    thread = await app.thread()
    await app.send(thread, "hello")
    names = {span.name for span in spans.get_finished_spans()}
    assert "run" in names
    assert "invoke_agent agent" in names or any(name.startswith("invoke_agent") for name in names)
    assert not any(name.startswith("store.") for name in names)
