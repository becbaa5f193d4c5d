"""Streaming output guardrails: a leak never leaves the server, safe text streams with a bounded holdback.

`HeldPart` alone, over every chunking hypothesis finds, then the step function on a real database
with a model that streams those chunks: neither an emitted delta nor the log ever holds the leak.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import AsyncIterator
from itertools import pairwise

import pytest
import regex
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from agent import ChatApp, open_runtime, run_step
from agent.guardrails import (
    INJECTION_PATTERNS,
    LEAK_PATTERNS,
    LEAK_REPLY,
    GuardrailContext,
    PatternGuardrail,
    PatternScanner,
    leak_guardrail,
)
from agent.holdback import HeldPart
from store import NewRun
from stream import CollectingSink, TextDelta, TextDone, TextWithdrawn, event_from_data

from .conftest import MigratedDatabases

pytestmark = pytest.mark.anyio

LEAK = leak_guardrail()

_LEAK_PHRASES = [
    ["internal", "error"],
    ["stack", "trace"],
    ["database", "connection"],
    ["api", "secret"],
    ["traceback", "(most", "recent", "call", "last)"],
]
_SECRET = "sk-live-4242"
_GAPS = st.sampled_from([" ", "  ", "\n", "_", "-", " \t"])
_SAFE_WORDS = st.sampled_from(
    # Near misses: each starts what a leak pattern could become, and then does not.
    ["Hello", "order", "internal", "internals", "stack", "stacks", "trace", "api", "apis", "data",
     "database", "connections?", "traceback", "recent", "ok.", "ORD-5678", "redis", "sk", "rk-lively",
     "postgres", "mysql:", "total:", "$99.98", "é", "ﬁle", "\n", "\uff2f\uff4b"]
)  # fmt: skip


def _chunkings(text: str) -> st.SearchStrategy[list[str]]:
    """`text` cut at any points: one chunk, single characters, or anything between."""
    cuts = st.lists(st.integers(1, max(1, len(text) - 1)), max_size=len(text)).map(sorted)
    return cuts.map(lambda points: [text[a:b] for a, b in pairwise([0, *points, len(text)]) if b > a])


@st.composite
def _leaking(draw: st.DrawFn) -> tuple[str, int]:
    """A reply that leaks, and where its leak starts."""
    words = draw(st.sampled_from(_LEAK_PHRASES))
    cased = ["".join(c.upper() if draw(st.booleans()) else c for c in word) for word in words]
    phrase = cased[0]
    for word in cased[1:]:
        if "(" in phrase:
            gap = " "  # within "(most recent call last)" the pattern takes single spaces only
        elif word.startswith("("):
            gap = draw(st.sampled_from(["", " ", "\n"]))
        else:
            gap = draw(_GAPS)
        phrase += gap + word
    before = " ".join(draw(st.lists(_SAFE_WORDS, max_size=6)))
    before += draw(st.sampled_from([" ", "\n", ": ", " ("]))
    secret = draw(
        st.sampled_from([f": api_secret={_SECRET}", f" {_SECRET}", " at postgres://app:pw@10.0.0.5/prod"])
    )
    return before + phrase + secret + draw(st.sampled_from(["", ".", " - sorry!"])), len(before)


@st.composite
def _safe(draw: st.DrawFn) -> str:
    words = draw(st.lists(_SAFE_WORDS, max_size=12))
    text = ""
    for word in words:
        text += word + draw(st.sampled_from([" ", ", ", ". ", "\n"]))
    return text.rstrip()


def _stream(part: HeldPart, chunks: list[str]) -> list[str]:
    return [shown for chunk in chunks if (shown := part.feed(chunk))]


@settings(max_examples=300)
@example(case=("Oops, an internal error occurred: api_secret=sk-live-4242", 9), data=None)
@given(case=_leaking(), data=st.data())
def test_a_leak_is_never_let_through_whatever_the_chunks(
    case: tuple[str, int], data: st.DataObject | None
) -> None:
    text, leak_start = case
    chunks = [text] if data is None else data.draw(_chunkings(text))
    part = HeldPart([LEAK])
    shown = "".join(_stream(part, chunks))
    # What was shown stops before the leak: not one character of it left.
    assert text.startswith(shown)
    assert len(shown) <= leak_start
    assert part.tripped is LEAK or LEAK.check(text, _NO_CONTEXT)
    assert not LEAK.check(shown, _NO_CONTEXT)


@settings(max_examples=300)
@given(text=_safe(), data=st.data())
def test_safe_text_is_let_through_whole_with_a_bounded_holdback(text: str, data: st.DataObject) -> None:
    if LEAK.check(text, _NO_CONTEXT):
        return  # near misses can combine into a real match ("database\nconnections?")
    chunks = data.draw(_chunkings(text))
    part = HeldPart([LEAK])
    so_far, shown = "", ""
    for chunk in chunks:
        so_far += chunk
        shown += part.feed(chunk)
        assert so_far.startswith(shown)
        # Held back: only a tail a pattern could still match from its start, and never long.
        held = so_far[len(shown) :]
        assert len(held) <= _LONGEST_HOLD
        if held:
            assert _could_start_a_match(so_far, len(shown))
    assert part.tripped is None
    assert shown + part.rest(text) == text


@given(text=st.text(alphabet="bcefghjklnoquvwxyzBCEFG 0123456789,.!?\n", max_size=200), data=st.data())
def test_text_no_pattern_can_start_in_streams_without_any_holdback(text: str, data: st.DataObject) -> None:
    # No letter a leak pattern starts with (i, s, t, d, a, r, p, m): nothing is ever held.
    part = HeldPart([LEAK])
    so_far = ""
    for chunk in data.draw(_chunkings(text)) if text else []:
        so_far += chunk
        assert part.feed(chunk) != "" or chunk == ""
        assert part.shown == len(so_far)


@given(text=st.text(max_size=60), data=st.data())
def test_a_guardrail_with_only_check_holds_the_whole_part_back(text: str, data: st.DataObject) -> None:
    class Plain:
        name = "plain"
        reply = "no"

        def check(self, text: str, context: GuardrailContext) -> bool:
            return False

    part = HeldPart([LEAK, Plain()])
    for chunk in data.draw(_chunkings(text)) if text else []:
        assert part.feed(chunk) == ""
    assert part.shown == 0
    assert part.rest(text) == text


def test_look_alike_letters_are_caught_while_streaming() -> None:
    part = HeldPart([LEAK])
    fullwidth = "".join(chr(ord(char) + 0xFEE0) if char != " " else char for char in "internal error")
    text = f"Sorry: {fullwidth}, key sk-live-1"
    shown = _stream(part, list(text))
    assert "".join(shown) == "Sorry: "
    assert part.tripped is LEAK


def test_a_custom_pattern_guardrail_streams_too() -> None:
    card = PatternGuardrail("card_number", (re.compile(r"\b(?:\d{4}[ -]?){3}\d{4}\b"),), "[redacted]")
    part = HeldPart([card])
    assert part.feed("Your order 1234") == "Your order "  # "1234" could start a card number
    assert part.feed(" ships today.") == "1234 ships today."
    assert part.feed(" Card 4242 4242 4242 42") == " Card "
    assert part.feed("42 was charged") == ""
    assert part.tripped is card


class _EveryPosition:
    """The scanner's definition, literally: every pattern tried at every position from the held one."""

    def __init__(self, patterns: tuple[re.Pattern[str], ...]) -> None:
        self._patterns = [
            regex.compile(pattern.pattern, pattern.flags & re.IGNORECASE and regex.IGNORECASE)
            for pattern in patterns
        ]
        self._text = ""
        self._held = 0

    def feed(self, text: str) -> int | None:
        self._text = text  # ASCII-only cases below: normalized text and text are the same
        end, held = len(text), None
        for position in range(self._held, end):
            for pattern in self._patterns:
                match = pattern.match(text, position, partial=True)
                if match is None:
                    continue
                if not match.partial and match.end() < end:
                    return None
                if held is None:
                    held = position
        self._held = end if held is None else held
        return self._held


_ASCII_WORDS = st.sampled_from(
    ["internal", "error", "stack", "trace", "database", "connection", "api", "secret", "sk-live-1",
     "rk_test_x", "postgres://", "redis+tls://", "traceback (most recent call last)", "ignore", "all",
     "previous", "instructions", "system", "prompt", "you", "are", "now", "ok", "s", "k", "i"]
)  # fmt: skip


_CUSTOM = (re.compile(r"a[^!]*!|b"), re.compile(r"\b(?:\d{2}[ -]?){2}\d{2}\b"))
"""Patterns whose match at one position can reach the end while a later one trips."""

_BACKREFERENCES = (re.compile(r"(a)\1"), re.compile(r"(b)\1"))
_MIXED_FLAGS = (re.compile("ab"), re.compile("xy", re.IGNORECASE))
"""Patterns the scanner cannot search as one (a reference would point to another's group, a flag
would apply to both): it tries each alone."""


@settings(max_examples=400)
@given(
    case=st.one_of(
        st.tuples(
            st.just(LEAK_PATTERNS + INJECTION_PATTERNS),
            st.lists(
                st.tuples(_ASCII_WORDS, st.sampled_from([" ", "", "_", "-", "\n", ". "])), max_size=10
            ).map(lambda words: "".join(word + gap for word, gap in words)),
        ),
        st.tuples(st.just(_CUSTOM), st.text(alphabet="ab! c12-", max_size=30)),
        st.tuples(
            st.sampled_from([_BACKREFERENCES, _MIXED_FLAGS]), st.text(alphabet="abxyXY! ", max_size=12)
        ),
    ),
    data=st.data(),
)
@example(case=(_BACKREFERENCES, "a bb!"), data=None)
@example(case=(_MIXED_FLAGS, "a XY!"), data=None)
@example(case=(_CUSTOM, "ab c"), data=None)  # a partial match at 0 ("a…!"), then "b" trips
@example(case=(_CUSTOM, "ab!"), data=None)  # a whole match reaching the end, then "b" trips
def test_the_scanner_holds_and_trips_exactly_where_trying_every_position_does(
    case: tuple[tuple[re.Pattern[str], ...], str], data: st.DataObject | None
) -> None:
    patterns, text = case
    scanner, reference = PatternScanner(patterns), _EveryPosition(patterns)
    so_far = ""
    chunks = [text] if data is None else data.draw(_chunkings(text)) if text else []
    for chunk in chunks:
        so_far += chunk
        expected = reference.feed(so_far)
        assert scanner.feed(so_far) == expected
        if expected is None:
            break


# -- the step function, on a real database ------------------------------------------------------------


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=_leaking().flatmap(lambda case: st.tuples(st.just(case[0]), _chunkings(case[0]))))
async def test_a_run_never_emits_nor_stores_a_leak(
    case: tuple[str, list[str]], migrated_databases: MigratedDatabases
) -> None:
    text, chunks = case
    url = await migrated_databases.empty("sqlite")
    async with open_runtime(ChatApp(agent=_streaming(chunks)), url) as runtime:
        db = runtime.db
        thread = await db.threads.create(user_id="alice", title="leak")
        run = (
            await db.runs.queue(
                NewRun(thread_id=thread.thread_id, kind="message", content="Why did my order fail?")
            )
        ).run
        sink = CollectingSink()
        assert await run_step(runtime, run.run_id, sink=sink) == "completed"
        logged = [event_from_data(e.type, e.data) for e in await db.events.read(thread.thread_id)]
        conversation = await db.conversations.load(thread.thread_id)
    assert logged == sink.events
    shown = "".join(e.delta for e in logged if isinstance(e, TextDelta))
    assert text.startswith(shown)
    assert not LEAK.check(shown, _NO_CONTEXT)
    for secret in (_SECRET, "postgres://", "10.0.0.5"):
        assert secret not in str(logged)
        assert conversation is not None
        assert secret not in str(conversation.messages)
    assert not any(isinstance(e, TextDone) for e in logged)
    [withdrawn] = [e for e in logged if isinstance(e, TextWithdrawn)]
    assert withdrawn.replacement == LEAK_REPLY


# -- helpers ----------------------------------------------------------------------------------------------


class _NoDatabase:
    """Pattern guardrails never touch the context's store."""


_NO_CONTEXT = GuardrailContext(db=_NoDatabase(), thread_id="t", run_id="r", user_id="u")  # pyright: ignore[reportArgumentType]

_LONGEST_HOLD = 40
"""The longest tail the leak patterns can hold back in these texts: "traceback (most recent call last"
(32 characters) with a few of the gaps drawn here."""


def _could_start_a_match(text: str, position: int) -> bool:
    """Whether a leak pattern, given more text, could match from `position` (or at the end, end there)."""
    normalized = "".join(unicodedata.normalize("NFKC", char) for char in text)
    start = len("".join(unicodedata.normalize("NFKC", char) for char in text[:position]))
    return any(
        regex.compile(pattern.pattern, regex.IGNORECASE).match(normalized, start, partial=True) is not None
        for pattern in LEAK.patterns
    )


def _streaming(chunks: list[str]) -> Agent[None, str]:
    """An agent whose model streams `chunks` as one text part."""

    async def stream(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str]:
        for chunk in chunks:
            yield chunk

    async def request(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return ModelResponse(parts=[TextPart("".join(chunks))])

    return Agent(FunctionModel(request, stream_function=stream, model_name="chunks"), name="support")
