"""Log records: stamped with the trace of the run they were logged in, and redacted."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
import sqlalchemy as sa
from dirty_equals import IsStr
from opentelemetry import trace
from pydantic_ai.usage import UsageLimits

from agent.logs import LOG_FORMAT, RedactingFilter, TraceIdFilter, current_trace_id, install_log_filters
from store.schema import RunRow, metadata

from .core_app import CoreFactory
from .scripted import Calls, Script

SECRET = "sk-live-0123456789abcdef"


class Collected(logging.Handler):
    """Keeps the records that pass its filters, and their formatted lines."""

    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []
        self.lines: list[str] = []
        self.setFormatter(logging.Formatter(LOG_FORMAT))

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)
        self.lines.append(self.format(record))


@pytest.fixture
def collected() -> Iterator[Collected]:
    """A handler on a test logger, with the filters `install_log_filters` puts on the CLI's handlers."""
    handler = Collected()
    logger = logging.getLogger("durable_chat_test")
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    install_log_filters([SECRET], loggers=["durable_chat_test"])
    try:
        yield handler
    finally:
        logger.removeHandler(handler)


def test_a_line_inside_a_span_names_its_trace_and_one_outside_does_not(collected: Collected) -> None:
    logger = logging.getLogger("durable_chat_test")
    with trace.get_tracer("test").start_as_current_span("work") as span:
        logger.info("inside")
        expected = format(span.get_span_context().trace_id, "032x")
    logger.info("outside")

    inside, outside = collected.records
    assert (getattr(inside, "trace_id", None), getattr(outside, "trace_id", None)) == (expected, "")
    assert collected.lines == [
        f"INFO durable_chat_test: inside trace_id={expected}",
        "INFO durable_chat_test: outside",
    ]
    assert current_trace_id() is None


def test_messages_arguments_and_tracebacks_are_redacted(collected: Collected) -> None:
    logger = logging.getLogger("durable_chat_test")
    try:
        raise ValueError(f"card 4111 1111 1111 1111 refused for {SECRET}")
    except ValueError:
        logger.exception("refund for %s failed, key %s", "bob@example.com", SECRET)

    [line] = collected.lines
    assert line.startswith("ERROR durable_chat_test: refund for [email] failed, key [secret]\nTraceback")
    assert line.endswith("ValueError: card [card] refused for [secret]")
    assert "bob@example.com" not in line
    assert SECRET not in line
    assert "4111" not in line
    # The arguments were redacted one by one: a formatter that reads them finds no address either.
    assert collected.records[0].args == ("[email]", "[secret]")


def test_a_number_argument_that_reads_as_a_card_is_masked_in_the_message(collected: Collected) -> None:
    logging.getLogger("durable_chat_test").info("charged %d for %s", 4111111111111111, "an order")

    assert collected.lines == ["INFO durable_chat_test: charged [card] for an order"]
    # A redacted number cannot go back into `%d`: the message replaces the format and its arguments.
    assert collected.records[0].args is None


def test_a_clean_record_is_left_as_it_is(collected: Collected) -> None:
    logging.getLogger("durable_chat_test").info("%s %s", "GET", "/api/threads")

    assert collected.records[0].msg == "%s %s"
    assert collected.records[0].args == ("GET", "/api/threads")


def test_installing_again_replaces_the_filters(collected: Collected) -> None:
    install_log_filters(["another-secret-value"], loggers=["durable_chat_test"])

    assert [type(f) for f in collected.filters] == [TraceIdFilter, RedactingFilter]
    logging.getLogger("durable_chat_test").warning("%s and %s", SECRET, "another-secret-value")
    assert collected.lines == [f"WARNING durable_chat_test: {SECRET} and [secret]"]


@pytest.mark.anyio
async def test_a_run_logs_with_its_trace_id(
    core_factory: CoreFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A model that calls a tool after every result, until the turn's limits end the run, which logs it at INFO.
    looping = Script([], then=Calls([("lookup", {"key": "plan"})]))
    app = await core_factory(looping, usage_limits=UsageLimits(request_limit=3))
    handler = Collected()
    handler.addFilter(TraceIdFilter())
    handler.addFilter(RedactingFilter())
    logger = logging.getLogger("agent")
    monkeypatch.setattr(logger, "level", logging.INFO)
    logger.addHandler(handler)
    try:
        thread = await app.thread()
        run_id = await app.send(thread, "Look it up again and again")
    finally:
        logger.removeHandler(handler)

    runs = metadata.tables[RunRow.__tablename__]
    async with app.db.engine.connect() as connection:
        trace_id = (
            await connection.execute(sa.select(runs.c.trace_id).where(runs.c.run_id == run_id))
        ).scalar_one()
    assert trace_id == IsStr(regex=r"[0-9a-f]{32}")
    [line] = [line for line in handler.lines if "usage limits" in line]
    assert line.startswith(f"INFO agent.step: run {run_id} hit its usage limits")
    assert line.endswith(f" trace_id={trace_id}")
