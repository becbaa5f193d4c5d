"""Nothing the server writes on disk grows without bound: the trace file (and the chat's log file) rotate."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from agent.trace_file import DEFAULT_TRACE_FILES, DEFAULT_TRACE_MAX_BYTES, append_capped, trace_files
from agent.tracing import JsonlSpanExporter
from cli.chat_logs import log_to
from cli.trace import read_spans
from web import Settings, SettingsError

LINE = "x" * 99 + "\n"  # 100 bytes


def _lines(path: Path) -> list[int]:
    return [int(line) for line in path.read_text().splitlines()]


def test_writing_past_the_cap_rotates_and_keeps_n_files(tmp_path: Path) -> None:
    path = tmp_path / "traces.jsonl"
    for n in range(20):
        append_capped(path, f"{n:099d}\n", max_bytes=300, keep=2)

    # 3 lines (300 bytes) a file: the current one, `.1` and `.2`; the older lines are gone.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["traces.jsonl", "traces.jsonl.1", "traces.jsonl.2"]
    assert trace_files(path) == [tmp_path / "traces.jsonl.2", tmp_path / "traces.jsonl.1", path]
    assert [_lines(p) for p in trace_files(path)] == [[12, 13, 14], [15, 16, 17], [18, 19]]
    assert all(p.stat().st_size <= 300 for p in tmp_path.iterdir())


def test_a_batch_is_never_split_and_a_file_is_rotated_only_when_it_holds_something(tmp_path: Path) -> None:
    path = tmp_path / "traces.jsonl"
    append_capped(path, LINE * 5, max_bytes=300, keep=1)  # bigger than the cap: written whole
    append_capped(path, LINE, max_bytes=300, keep=1)

    assert [p.stat().st_size for p in trace_files(path)] == [500, 100]


def test_keeping_no_file_starts_afresh_at_the_cap(tmp_path: Path) -> None:
    path = tmp_path / "traces.jsonl"
    for _ in range(4):
        append_capped(path, LINE, max_bytes=200, keep=0)

    assert [p.name for p in tmp_path.iterdir()] == ["traces.jsonl"]
    assert path.stat().st_size == 200


def test_no_cap_never_rotates(tmp_path: Path) -> None:
    path = tmp_path / "traces.jsonl"
    for _ in range(10):
        append_capped(path, LINE, max_bytes=None, keep=2)

    assert trace_files(path) == [path]
    assert path.stat().st_size == 1000


def test_the_exporter_rotates_and_the_trace_command_reads_every_kept_file(tmp_path: Path) -> None:
    path = tmp_path / "data" / "traces.jsonl"
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(JsonlSpanExporter(path, max_bytes=2000, keep=3)))
    tracer = provider.get_tracer("durable_chat.test")
    for n in range(40):
        with tracer.start_as_current_span(f"span-{n}"):
            pass
    provider.shutdown()

    files = trace_files(path)
    assert len(files) == 4  # the current file and 3 kept
    assert all(p.stat().st_size <= 2000 for p in files)
    names = [span.name for span in read_spans(path)]
    assert names == [f"span-{n}" for n in range(40 - len(names), 40)]  # the newest, in order
    assert all(json.loads(line)["name"].startswith("span-") for line in path.read_text().splitlines())


def test_the_trace_file_is_capped_by_default_and_configurable(tmp_path: Path) -> None:
    default = Settings.load(secret="s", data_dir=tmp_path, environ={}).tracing
    assert (default.trace_max_bytes, default.trace_files) == (DEFAULT_TRACE_MAX_BYTES, DEFAULT_TRACE_FILES)
    assert (default.trace_max_bytes, default.trace_files) == (100 * 1024 * 1024, 4)

    environ = {"DURABLE_CHAT_TRACE_MAX_MB": "0.5", "DURABLE_CHAT_TRACE_FILES": "2"}
    tracing = Settings.load(secret="s", data_dir=tmp_path, environ=environ).tracing
    assert (tracing.trace_max_bytes, tracing.trace_files) == (512 * 1024, 2)

    unbounded = Settings.load(secret="s", data_dir=tmp_path, environ={"DURABLE_CHAT_TRACE_MAX_MB": "0"})
    assert unbounded.tracing.trace_max_bytes is None


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("TRACE_MAX_MB", "-1", "DURABLE_CHAT_TRACE_MAX_MB must be a non-negative number, not '-1'"),
        ("TRACE_MAX_MB", "lots", "DURABLE_CHAT_TRACE_MAX_MB must be a non-negative number, not 'lots'"),
        ("TRACE_FILES", "1.5", "DURABLE_CHAT_TRACE_FILES must be a non-negative whole number, not '1.5'"),
    ],
)
def test_a_bad_trace_cap_is_refused(tmp_path: Path, name: str, value: str, message: str) -> None:
    with pytest.raises(SettingsError) as raised:
        Settings.load(secret="s", data_dir=tmp_path, environ={f"DURABLE_CHAT_{name}": value})
    assert str(raised.value) == message


def test_the_chats_log_file_rotates_too(tmp_path: Path) -> None:
    path = tmp_path / "logs" / "chat.log"
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    try:
        log_to(str(path), max_bytes=1000, keep=2)
        for n in range(100):
            logging.getLogger("agent.test").warning("line %03d %s", n, "y" * 40)
    finally:
        for handler in list(root.handlers):
            root.removeHandler(handler)
            handler.close()
        for handler in handlers:
            root.addHandler(handler)
        root.setLevel(level)
        logging.captureWarnings(False)

    assert sorted(p.name for p in path.parent.iterdir()) == ["chat.log", "chat.log.1", "chat.log.2"]
    assert all(p.stat().st_size <= 1000 for p in path.parent.iterdir())
    assert "line 099" in path.read_text()
