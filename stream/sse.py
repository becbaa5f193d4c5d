"""Server-sent events framing, in one pure place.

Frames follow the WHATWG `text/event-stream` format
(https://html.spec.whatwg.org/multipage/server-sent-events.html), modelled on sse-starlette's
`event.py`. Deliberate choices:

- Lines end with `\\n`, the shortest separator every parser accepts; a frame ends with a blank line.
- Text is UTF-8, the only encoding the format allows.
- Multi-line data becomes one `data:` line per line, split on `\\r\\n`, `\\r` and `\\n` only (the
  format's line ends; not `str.splitlines`, which also splits on U+2028 and others). A client joins
  them with `\\n`, so data reads back exactly, newlines normalised to `\\n`.
- A CR, LF (or, for `id`, NUL) in `id` or `event` is rejected with `ValueError`, where sse-starlette
  strips it: these values come from our own code, never from users, so one there is a bug, and a
  silently altered id would resume a reconnecting client at the wrong place.
- A batch of events (`encode_events`) is the concatenation of their frames, for one write: a
  reply's deltas stored in one flush reach the socket in one send, not one per event.
- Field values follow `": "`: the parser drops exactly one space after the colon, so data that
  itself begins with a space survives.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from .events import StoredEvent

__all__ = ["encode_event", "encode_events", "encode_frame", "ping_frame"]

_LINE_END = re.compile(r"\r\n|\r|\n")
_NEWLINE = re.compile(r"[\r\n]")
_NEWLINE_OR_NUL = re.compile(r"[\r\n\0]")


def encode_frame(
    *,
    data: str | None = None,
    event: str | None = None,
    event_id: int | str | None = None,
    retry_ms: int | None = None,
    comment: str | None = None,
) -> bytes:
    """Encode one SSE frame; fields that are None are left out.

    Lines come in this order: comment, `id`, `event`, `retry`, `data`.

    Args:
        data: The event's data; a frame without it dispatches no event (the `id` still counts).
        event: The event name; clients see `message` when it is absent.
        event_id: The id a reconnecting client sends back as `Last-Event-ID`.
        retry_ms: How long a client waits before reconnecting, in milliseconds.
        comment: Text clients ignore, one `:` line per line; keeps idle connections open.

    Raises:
        ValueError: All fields are None; `event` or `event_id` contains a line end (or `event_id` a
            NUL); `retry_ms` is negative.
    """
    if data is None and event is None and event_id is None and retry_ms is None and comment is None:
        raise ValueError("an SSE frame needs at least one field")
    lines: list[str] = []
    if comment is not None:
        lines.extend(f": {line}" for line in _LINE_END.split(comment))
    if event_id is not None:
        event_id = str(event_id)
        if _NEWLINE_OR_NUL.search(event_id):
            raise ValueError(f"an SSE id cannot contain CR, LF or NUL: {event_id!r}")
        lines.append(f"id: {event_id}")
    if event is not None:
        if _NEWLINE.search(event):
            raise ValueError(f"an SSE event name cannot contain CR or LF: {event!r}")
        lines.append(f"event: {event}")
    if retry_ms is not None:
        # bool is an int, but `retry: True` is ignored by every client.
        if isinstance(retry_ms, bool) or retry_ms < 0:
            raise ValueError(f"retry_ms must be a non-negative int, not {retry_ms!r}")
        lines.append(f"retry: {retry_ms}")
    if data is not None:
        lines.extend(f"data: {line}" for line in _LINE_END.split(data))
    return ("\n".join(lines) + "\n\n").encode()


def encode_event(stored: StoredEvent) -> bytes:
    """Encode a stored event as a frame: its id, its type as the event name, its JSON as data."""
    return encode_frame(event_id=stored.event_id, event=stored.event.type, data=stored.encoded().decode())


def encode_events(events: Iterable[StoredEvent]) -> bytes:
    """Encode events as their frames, one after the other, to be written at once."""
    return b"".join(encode_event(stored) for stored in events)


def ping_frame() -> bytes:
    """A keep-alive: a comment, which clients ignore, so proxies do not close an idle stream."""
    return b": ping\n\n"
