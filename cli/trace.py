"""`durable-chat trace RUN_ID`: a run's spans from the JSONL trace file, as an indented tree with timings.

The run's row names the trace of its latest attempt (`runs.trace_id`); earlier attempts are found by
their `run` span, which carries the run id. Each trace is printed as a tree: a span under its
parent, children in the order they started, each with its duration in milliseconds. A span whose
parent is not in the file (the `approval` span, under the paused run's trace; a span whose parent
was not exported yet) is shown as a root. A run whose trace was not sampled has its `run` span
(and its decisions' `approval` spans) only, and a line under the tree says so.
"""

from __future__ import annotations

import asyncio
import json
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from sqlalchemy.engine import make_url

from agent import trace_files
from store import Database, StoreError, run_trace_id

__all__ = ("Span", "TraceFileError", "read_spans", "render_trace", "run_traces")

RUN_SPAN = "run"
RUN_ID_ATTRIBUTE = "durable_chat.run_id"
STARTED_ATTRIBUTE = "durable_chat.run.started"
SAMPLED_ATTRIBUTE = "durable_chat.trace.sampled"
UNSAMPLED_NOTE = (
    "(only the run's own span was recorded: its trace was not in the sample; "
    "DURABLE_CHAT_TRACE_SAMPLE sets the share of runs traced in full)"
)


class TraceFileError(Exception):
    """The trace file cannot be read, or holds no span of the run."""


@dataclass(frozen=True)
class Span:
    """One line of the trace file, as much of it as the tree shows."""

    name: str
    trace_id: str
    span_id: str
    parent_span_id: str | None
    start: int
    end: int
    status: str
    attributes: dict[str, object]

    @property
    def milliseconds(self) -> float:
        return (self.end - self.start) / 1e6


def read_spans(path: Path) -> Iterator[Span]:
    """Every well-formed span of the file and of its rotated predecessors (`path.1`, ...), oldest
    first; a line cut short (a writer that died) is skipped.

    Raises:
        TraceFileError: The file cannot be read.
    """
    try:
        for each in trace_files(path) or [path]:
            with each.open(encoding="utf-8") as file:
                for line in file:
                    span = _span(line)
                    if span is not None:
                        yield span
    except OSError as error:
        raise TraceFileError(f"cannot read the trace file {str(path)!r}: {error.strerror}") from error


def _span(line: str) -> Span | None:
    try:
        record = json.loads(line)
        return Span(
            name=str(record["name"]),
            trace_id=str(record["trace_id"]),
            span_id=str(record["span_id"]),
            parent_span_id=None if record["parent_span_id"] is None else str(record["parent_span_id"]),
            start=int(record["start_time_unix_nano"]),
            end=int(record["end_time_unix_nano"]),
            status=str(record.get("status", "UNSET")),
            attributes=dict(record.get("attributes") or {}),
        )
    except (ValueError, TypeError, KeyError, AttributeError):
        return None


def stored_trace_id(database_url: str, run_id: str) -> str | None:
    """The trace id the run's row holds; `None` when the database, the run or its trace id is missing.

    The database only narrows the search: without it, the run's spans are found by their run id. It
    is opened as it is, never created or upgraded, as a command that reads spans must not write.
    """
    url = make_url(database_url)
    if url.get_backend_name() == "sqlite" and not Path(url.database or "").is_file():
        return None
    return asyncio.run(_stored_trace_id(database_url, run_id))


async def _stored_trace_id(database_url: str, run_id: str) -> str | None:
    try:
        async with await Database.connect(database_url, migrate=False) as db:
            return await run_trace_id(db.engine, run_id)
    except StoreError:  # NotFound, a database from before trace ids, an unreachable server
        return None


def run_traces(path: Path, run_id: str, trace_id: str | None) -> list[list[Span]]:
    """The spans of each trace of `run_id` (`trace_id` and those of its `run` spans), oldest first.

    Raises:
        TraceFileError: The file cannot be read or holds no span of the run.
    """
    wanted = {trace_id} if trace_id is not None else set[str]()
    for span in read_spans(path):
        # A run span that found its run taken or ended (`started` false) did no work: not an attempt.
        if (
            span.name == RUN_SPAN
            and span.attributes.get(RUN_ID_ATTRIBUTE) == run_id
            and span.attributes.get(STARTED_ATTRIBUTE) is not False
        ):
            wanted.add(span.trace_id)
    traces: dict[str, list[Span]] = defaultdict(list)
    if wanted:
        for span in read_spans(path):
            if span.trace_id in wanted:
                traces[span.trace_id].append(span)
    if not traces:
        raise TraceFileError(f"no spans of run {run_id!r} in {str(path)!r}")
    return sorted(traces.values(), key=lambda spans: min(span.start for span in spans))


def render_trace(spans: list[Span], out: TextIO) -> None:
    """Print one trace: a header, then each span indented under its parent with its duration."""
    known = {span.span_id for span in spans}
    children: dict[str | None, list[Span]] = defaultdict(list)
    for span in spans:
        parent = span.parent_span_id if span.parent_span_id in known - {span.span_id} else None
        children[parent].append(span)
    shown: set[str] = set()  # a file with a span twice must not loop
    run = next((span for span in spans if span.name == RUN_SPAN), None)
    header = f"trace {spans[0].trace_id}"
    if run is not None:
        details = [
            f"{key.rsplit('.', 1)[-1]} {run.attributes[key]}"
            for key in ("durable_chat.run_id", "durable_chat.run.attempt", "durable_chat.run.status")
            if key in run.attributes
        ]
        header += f" ({', '.join(details)})"
    out.write(header + "\n")

    def walk(parent: str | None, depth: int) -> None:
        for span in sorted(children[parent], key=lambda s: (s.start, s.end)):
            if span.span_id in shown:
                continue
            shown.add(span.span_id)
            error = "  [error]" if span.status == "ERROR" else ""
            out.write(f"{'  ' * depth}{span.name}  {span.milliseconds:.1f} ms{error}\n")
            walk(span.span_id, depth + 1)

    walk(None, 1)
    if run is not None and run.attributes.get(SAMPLED_ATTRIBUTE) is False:
        out.write(f"  {UNSAMPLED_NOTE}\n")
