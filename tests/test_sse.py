"""SSE framing, byte for byte, and read back by a parser that follows the WHATWG algorithm."""

from __future__ import annotations

import re
from dataclasses import dataclass

import pytest
from hypothesis import given
from hypothesis import strategies as st

from stream import (
    RunFinished,
    StoredEvent,
    TextDelta,
    ToolCall,
    encode_event,
    encode_events,
    encode_frame,
    event_from_data,
    ping_frame,
)


@dataclass(frozen=True)
class Received:
    """An event as a browser's `EventSource` dispatches it."""

    type: str
    data: str
    last_event_id: str


def parse(stream: bytes) -> list[Received]:
    """Parse an event stream as https://html.spec.whatwg.org/multipage/server-sent-events.html says."""
    text = stream.decode("utf-8")
    text = text.removeprefix("\ufeff")
    # Whatever follows the last line end is an incomplete line, and an incomplete event is dropped.
    *lines, _ = re.split(r"\r\n|\r|\n", text)
    received: list[Received] = []
    data, event_type, last_event_id_buffer, last_event_id = "", "", "", ""
    for line in lines:
        if not line:
            last_event_id = last_event_id_buffer
            if data:
                received.append(Received(event_type or "message", data.removesuffix("\n"), last_event_id))
            data, event_type = "", ""
            continue
        if line.startswith(":"):
            continue
        name, colon, value = line.partition(":")
        if colon:
            value = value.removeprefix(" ")
        match name:
            case "event":
                event_type = value
            case "data":
                data += value + "\n"
            case "id" if "\0" not in value:
                last_event_id_buffer = value
            case (
                _
            ):  # `retry` sets the reconnection time, which this parser does not keep; others are ignored.
                pass
    return received


def test_data_on_one_line() -> None:
    assert encode_frame(data="hello") == b"data: hello\n\n"


@pytest.mark.parametrize(
    ("data", "frame"),
    [
        pytest.param("a\nb", b"data: a\ndata: b\n\n", id="lf"),
        pytest.param("a\r\nb", b"data: a\ndata: b\n\n", id="crlf"),
        pytest.param("a\rb", b"data: a\ndata: b\n\n", id="cr"),
        pytest.param("a\r\n\nb\r", b"data: a\ndata: \ndata: b\ndata: \n\n", id="mixed"),
        pytest.param("\n", b"data: \ndata: \n\n", id="only-newline"),
        pytest.param("", b"data: \n\n", id="empty"),
        pytest.param(" indented", b"data:  indented\n\n", id="leading-space"),
        pytest.param(
            "a\u2028b\x0bc\x1cd\x85e", "data: a\u2028b\x0bc\x1cd\x85e\n\n".encode(), id="not-line-ends"
        ),
    ],
)
def test_multi_line_data_becomes_several_data_lines(data: str, frame: bytes) -> None:
    assert encode_frame(data=data) == frame
    assert parse(frame) == [Received("message", data.replace("\r\n", "\n").replace("\r", "\n"), "")]


def test_all_fields_in_order() -> None:
    frame = encode_frame(data="x", event="text_delta", event_id=42, retry_ms=3000, comment="hi")

    assert frame == b": hi\nid: 42\nevent: text_delta\nretry: 3000\ndata: x\n\n"
    assert parse(frame) == [Received("text_delta", "x", "42")]


def test_unicode_is_utf8() -> None:
    frame = encode_frame(data="Grüße 👋", event="ünïcode", event_id="ид")

    assert frame == "id: ид\nevent: ünïcode\ndata: Grüße 👋\n\n".encode()
    assert parse(frame) == [Received("ünïcode", "Grüße 👋", "ид")]


@pytest.mark.parametrize("event_id", ["4\n2", "4\r2", "4\r\n2", "42\n", "4\x002"])
def test_line_ends_or_nul_in_an_id_are_rejected(event_id: str) -> None:
    with pytest.raises(ValueError, match="an SSE id cannot contain CR, LF or NUL"):
        encode_frame(data="x", event_id=event_id)


@pytest.mark.parametrize("event", ["text\ndelta", "text\rdelta", "text_delta\r\ndata: forged"])
def test_line_ends_in_an_event_name_are_rejected(event: str) -> None:
    with pytest.raises(ValueError, match="an SSE event name cannot contain CR or LF"):
        encode_frame(data="x", event=event)


def test_comments_one_line_each() -> None:
    assert encode_frame(comment="keep\nalive\r\n") == b": keep\n: alive\n: \n\n"
    assert encode_frame(comment="") == b": \n\n"
    assert parse(encode_frame(comment="keep\ndata: forged")) == []


def test_retry() -> None:
    assert encode_frame(retry_ms=0) == b"retry: 0\n\n"
    assert parse(encode_frame(retry_ms=1500)) == []


@pytest.mark.parametrize("retry_ms", [-1, True])
def test_retry_must_be_a_non_negative_int(retry_ms: int) -> None:
    with pytest.raises(ValueError, match="retry_ms must be a non-negative int"):
        encode_frame(retry_ms=retry_ms)


def test_an_id_alone_moves_the_last_event_id() -> None:
    stream = encode_frame(event_id=5) + encode_frame(data="after")

    assert encode_frame(event_id=5) == b"id: 5\n\n"
    assert parse(stream) == [Received("message", "after", "5")]


def test_an_empty_frame_is_rejected() -> None:
    with pytest.raises(ValueError, match="needs at least one field"):
        encode_frame()


def test_ping_is_a_comment() -> None:
    assert ping_frame() == b": ping\n\n"
    assert parse(ping_frame() + encode_frame(data="x") + ping_frame()) == [Received("message", "x", "")]


def test_encode_event() -> None:
    stored = StoredEvent(event_id=12, event=TextDelta(run_id="run-1", part_id="p0", delta="Hello\nworld"))

    assert encode_event(stored) == (
        b'id: 12\nevent: text_delta\ndata: {"run_id":"run-1","part_id":"p0","delta":"Hello\\nworld"}\n\n'
    )


def test_a_batch_is_its_frames_in_one_piece() -> None:
    batch = [
        StoredEvent(7, TextDelta(run_id="r", part_id="p0", delta="Hel")),
        StoredEvent(9, TextDelta(run_id="r", part_id="p0", delta="lo")),
    ]

    assert encode_events(batch) == (
        b'id: 7\nevent: text_delta\ndata: {"run_id":"r","part_id":"p0","delta":"Hel"}\n\n'
        b'id: 9\nevent: text_delta\ndata: {"run_id":"r","part_id":"p0","delta":"lo"}\n\n'
    )
    assert encode_events([]) == b""


def test_encoded_events_read_back() -> None:
    events = [
        StoredEvent(1, ToolCall(run_id="r", tool_call_id="c", tool_name="t", args={"text": "a\nb\r\nc"})),
        StoredEvent(2, TextDelta(run_id="r", part_id="p0", delta="\u2028\r")),
        StoredEvent(3, RunFinished(run_id="r", status="completed")),
    ]

    received = parse(encode_events(events))

    assert [int(item.last_event_id) for item in received] == [1, 2, 3]
    assert [event_from_data(item.type, item.data.encode()) for item in received] == [
        stored.event for stored in events
    ]


# Parser-significant characters come up far more often than in plain `st.text()`.
texts = st.text(st.sampled_from("\r\n\0 :a\ufeffé\u2028") | st.characters(codec="utf-8"))
names = texts.filter(lambda text: not re.search(r"[\r\n]", text))


@given(data=texts, event=st.none() | names, event_id=st.none() | names.filter(lambda text: "\0" not in text))
def test_any_frame_parses_back(data: str, event: str | None, event_id: str | None) -> None:
    frame = encode_frame(data=data, event=event, event_id=event_id)

    assert parse(frame) == [Received(event or "message", re.sub(r"\r\n?", "\n", data), event_id or "")]


@given(comment=texts, data=st.lists(texts, max_size=4))
def test_any_stream_of_frames_parses_back(comment: str, data: list[str]) -> None:
    stream = b"".join(
        encode_frame(data=item, comment=comment, event_id=index) for index, item in enumerate(data)
    )

    assert parse(stream) == [
        Received("message", re.sub(r"\r\n?", "\n", item), str(index)) for index, item in enumerate(data)
    ]
