"""Guardrails: checks on what a user sends before the model sees it, and on what the model writes
before it is stored or shown as final.

A guardrail is any object with a `name`, a `reply` and a `check(text, context)` that answers
whether the text trips it, synchronously or as an awaitable; it may read the store through the
`GuardrailContext` it receives. `Guardrails` lists the input and the output ones of an agent (on
`agent.Runtime`); the first that trips decides:

- an **input** guardrail ends the run `blocked` before any model or tool call; its `reply` is the
  polite answer the user gets, stored with their message;
- an **output** guardrail replaces a text part the model wrote with its `reply`, everywhere the
  part went (see `agent.withdrawals`). While a part streams, what may be shown of it is what no
  guardrail could still trip on: a guardrail with a `scanner()` (every `PatternGuardrail`) holds
  back only the tail a match could still cover; one with only `check` holds back the whole part
  until it is complete (see "Guardrails" in `docs/agent.md`).

Patterns are matched on NFKC-normalized text, case-insensitively, with any run of spaces, tabs,
newlines, `_` or `-` between their words, so "Ignore   PREVIOUS\\ninstructions" trips as well.
"""

from __future__ import annotations

import bisect
import functools
import inspect
import operator
import re
import unicodedata
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol, runtime_checkable

import regex
from pydantic_ai import RunContext
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart, UserPromptPart
from pydantic_ai.models import ModelRequestContext

from store import Database, now_utc

from .texts import Texts

__all__ = (
    "INJECTION_PATTERNS",
    "LEAK_PATTERNS",
    "Guardrail",
    "GuardrailContext",
    "Guardrails",
    "HideBlockedTurns",
    "MessageRate",
    "PatternGuardrail",
    "PatternScanner",
    "StreamingGuardrail",
    "TextScanner",
    "blocked_turn",
    "default_guardrails",
    "first_tripped",
    "injection_guardrail",
    "leak_guardrail",
    "message_window",
    "phrase",
)


@dataclass(frozen=True)
class GuardrailContext:
    """What a check may use besides the text: the store, and whose run it is."""

    db: Database
    thread_id: str
    run_id: str
    user_id: str
    messages_sent: tuple[timedelta, int] | None = None
    """The user's messages within a window, counted when the run was queued (see `MessageRate`)."""


class Guardrail(Protocol):
    """A check on a text; `check` may be a plain or an async method."""

    @property
    def name(self) -> str:
        """Names the guardrail in the `guardrail_tripped` event and the logs."""
        ...

    @property
    def reply(self) -> str:
        """What the user gets instead: the polite answer (input) or the safe replacement (output)."""
        ...

    def check(self, text: str, context: GuardrailContext) -> bool | Awaitable[bool]:
        """Whether `text` trips the guardrail."""
        ...


class TextScanner(Protocol):
    """Follows one text part as it streams, for one output guardrail."""

    def feed(self, text: str) -> int | None:
        """Take the part so far (each call extends the text of the previous one).

        Returns how many of its first characters no trip can cover, whatever text follows (never
        fewer than the previous answer), or `None` when the text trips the guardrail already.
        """
        ...


@runtime_checkable
class StreamingGuardrail(Protocol):
    """An output guardrail that can judge a part while it streams, besides its `check`.

    `check` on the complete part stays the final word; the scanner only says how much may be
    shown meanwhile. An output guardrail without `scanner` holds back the whole part.
    """

    def scanner(self) -> TextScanner:
        """A new scanner for one text part."""
        ...


class PatternScanner:
    """The streaming form of a `PatternGuardrail`: holds back the tail a pattern match could still cover.

    The text is normalized character by character (NFKC), which for patterns over ASCII finds every
    match whole-text normalization finds (composing a character with a following mark never makes
    an ASCII letter). At each position from where the held tail starts, each pattern is tried with
    partial matching (the `regex` module): a match that could go on with more text, or one that
    reaches the end of the text so far (a `\b` there may still fail), holds the text back from its
    start; a complete match followed by more text trips.
    """

    def __init__(self, patterns: Sequence[re.Pattern[str]]) -> None:
        self._patterns = [_partial(pattern.pattern, pattern.flags) for pattern in patterns]
        self._any = _any_of(tuple((pattern.pattern, pattern.flags) for pattern in patterns))
        self._normalized = ""
        self._ends = [0]
        """`_ends[i]`: the length of the normalized text of the first `i` characters."""
        self._held = 0
        """The normalized position from which a match may still start; none can before."""

    def feed(self, text: str) -> int | None:
        """See `TextScanner.feed`."""
        added = text[len(self._ends) - 1 :]
        if added.isascii():  # its own normal form, a character each
            start = len(self._normalized)
            self._normalized += added
            self._ends.extend(range(start + 1, start + len(added) + 1))
        else:
            for char in added:
                self._normalized += unicodedata.normalize("NFKC", char)
                self._ends.append(len(self._normalized))
        normalized, end = self._normalized, len(self._normalized)
        held = end
        # Most text comes near no pattern: one search of them all says so, and then none is tried
        # alone (no match anywhere, nor the start of one before the end: nothing to hold back).
        first = None if self._any is None else self._any.search(normalized, self._held, partial=True)
        nothing = self._any is not None and (first is None or (first.partial and first.start() == end))
        for pattern in () if nothing else self._patterns:
            # A search, in C, instead of a match tried at every position: it finds the first whole
            # match if there is one anywhere, else the first partial one (text that could still
            # become a match). Only a whole match reaching the end (a `\b` there may still fail)
            # needs more: a partial match may start before it, a whole one after it may trip.
            position = self._held
            while (match := pattern.search(normalized, position, partial=True)) is not None:
                start = match.start()
                if match.partial:
                    held = min(held, start)
                    break
                if match.end() < end:
                    return None
                partial = (at for at in range(position, start) if pattern.match(normalized, at, partial=True))
                held = min(held, next(partial, start))
                position = start + 1
        self._held = held
        # The characters whose whole normalized text lies before the held position.
        return bisect.bisect_right(self._ends, self._held) - 1


@functools.cache
def _partial(source: str, flags: int) -> regex.Pattern[str]:
    """The `regex` twin of a `re` pattern, for partial matching (some flags have other values)."""
    twin = 0
    for name in ("IGNORECASE", "MULTILINE", "DOTALL", "VERBOSE", "ASCII", "UNICODE"):
        if flags & getattr(re, name):
            twin |= getattr(regex, name)
    return regex.compile(source, twin)


_GLOBAL_FLAGS = re.compile(r"\(\?[a-zA-Z]+\)")


@functools.cache
def _any_of(patterns: tuple[tuple[str, int], ...]) -> regex.Pattern[str] | None:
    """One pattern that matches (or could still match) where any of `patterns` does; `None` when they
    cannot be joined as they are: fewer than two, different flags, groups (a numbered reference
    would point elsewhere), or inline flags (which would apply to the others)."""
    if len(patterns) < 2 or len({flags for _, flags in patterns}) > 1:
        return None
    flags = patterns[0][1]
    end = "\n)" if flags & re.VERBOSE else ")"  # a verbose pattern's comment ends at a newline
    if any(re.compile(source, flags).groups or _GLOBAL_FLAGS.search(source) for source, _ in patterns):
        return None
    try:
        return _partial("|".join(f"(?:{source}{end}" for source, _ in patterns), flags)
    except regex.error:
        return None


def phrase(*words: str, gap: str = r"[\s_\-]+") -> re.Pattern[str]:
    """A case-insensitive pattern for `words` in order, with `gap` between them, as whole words."""
    return re.compile(r"\b" + gap.join(re.escape(word) for word in words) + r"\b", re.IGNORECASE)


INJECTION_PATTERNS: tuple[re.Pattern[str], ...] = (
    re.compile(
        r"\bignore[\s_\-]+(?:(?:all|any|the|your|of|my)[\s_\-]+)*(?:previous|prior|above|earlier)"
        r"[\s_\-]+(?:instructions?|prompts?|rules)\b",
        re.IGNORECASE,
    ),
    phrase("system", "prompt", gap=r"[\s_\-]*"),
    phrase("you", "are", "now"),
)
"""Prompt-injection phrasings: overriding the instructions, probing the system prompt, re-casting the agent."""

LEAK_PATTERNS: tuple[re.Pattern[str], ...] = (
    phrase("internal", "error"),
    phrase("stack", "trace", gap=r"[\s_\-]*"),
    re.compile(r"\btraceback\s*\(most recent call last\)", re.IGNORECASE),
    phrase("database", "connection"),
    phrase("api", "secret", gap=r"[\s_\-]*"),
    # A live or test secret key (`sk-live-…`), and a database URL (it names hosts, often a password).
    re.compile(r"\b[rs]k[_\-](?:live|test)[_\-]\w", re.IGNORECASE),
    re.compile(
        r"\b(?:postgres(?:ql)?|mysql|mariadb|mongodb(?:\+srv)?|redis|amqp)(?:\+\w+)?://", re.IGNORECASE
    ),
)
"""What a reply must not show: internal failures and their details, connection strings, secrets."""

INJECTION_REPLY = Texts().blocked
RATE_REPLY = Texts().rate_limited
LEAK_REPLY = Texts().withheld


@dataclass(frozen=True)
class PatternGuardrail:
    """Trips when any of `patterns` matches the normalized text."""

    name: str
    patterns: tuple[re.Pattern[str], ...]
    reply: str

    def check(self, text: str, context: GuardrailContext) -> bool:
        """Whether a pattern matches `text` (NFKC-normalized, so look-alike letters count)."""
        normalized = unicodedata.normalize("NFKC", text)
        return any(pattern.search(normalized) for pattern in self.patterns)

    def scanner(self) -> PatternScanner:
        """Judges a part as it streams: see `PatternScanner`."""
        return PatternScanner(self.patterns)


def injection_guardrail(reply: str = INJECTION_REPLY) -> PatternGuardrail:
    """The input guardrail against prompt injection."""
    return PatternGuardrail("prompt_injection", INJECTION_PATTERNS, reply)


def leak_guardrail(reply: str = LEAK_REPLY) -> PatternGuardrail:
    """The output guardrail against replies that leak internals."""
    return PatternGuardrail("internal_leak", LEAK_PATTERNS, reply)


@dataclass(frozen=True)
class MessageRate:
    """Trips when the user sent more than `limit` messages within `window`, across all their threads.

    It reads the store (the user's message runs queued in the window, this one included), so the
    limit holds across processes and restarts. Blocked messages count too: a user who keeps
    sending stays blocked until the window has passed.
    """

    limit: int = 30
    window: timedelta = timedelta(minutes=1)
    name: str = "message_rate"
    reply: str = RATE_REPLY

    async def check(self, text: str, context: GuardrailContext) -> bool:
        """Whether this message is beyond the user's limit."""
        counted = context.messages_sent
        if counted is not None and counted[0] == self.window:
            # Counted in the transaction that queued the run: no read of its own.
            return counted[1] > self.limit
        sent = await context.db.runs.count_messages(context.user_id, since=now_utc() - self.window)
        return sent > self.limit


@dataclass(frozen=True)
class Guardrails:
    """An agent's guardrails: `input` ones run before the model is called, `output` ones on its text."""

    input: Sequence[Guardrail] = field(default_factory=tuple[Guardrail, ...])
    output: Sequence[Guardrail] = field(default_factory=tuple[Guardrail, ...])


def message_window(guardrails: Guardrails) -> timedelta | None:
    """The window of the first `MessageRate` among the input guardrails: what to count when queueing a run."""
    for guardrail in guardrails.input:
        if isinstance(guardrail, MessageRate):
            return guardrail.window
    return None


def default_guardrails(*, messages_per_minute: int | None = 30, texts: Texts | None = None) -> Guardrails:
    """Prompt injection and a message rate on input (`None`: no rate limit), leaks on output,
    answering with `texts`."""
    texts = Texts() if texts is None else texts
    rate = (
        ()
        if messages_per_minute is None
        else (MessageRate(limit=messages_per_minute, reply=texts.rate_limited),)
    )
    return Guardrails(
        input=(injection_guardrail(texts.blocked), *rate), output=(leak_guardrail(texts.withheld),)
    )


async def first_tripped(
    guardrails: Sequence[Guardrail], text: str, context: GuardrailContext
) -> Guardrail | None:
    """The first of `guardrails` that `text` trips, in order, or `None`."""
    for guardrail in guardrails:
        verdict = guardrail.check(text, context)
        if inspect.isawaitable(verdict):
            verdict = await verdict
        if verdict:
            return guardrail
    return None


BLOCKED_BY = "blocked_by"
"""The `metadata` key of a reply an input guardrail gave in place of the model: the guardrail's name."""


def blocked_turn(prompt: str, guardrail: Guardrail, *, run_id: str) -> list[ModelMessage]:
    """The user's blocked message and the guardrail's reply, as the conversation stores them."""
    now = datetime.now(UTC)
    return [
        ModelRequest(parts=[UserPromptPart(prompt, timestamp=now)], timestamp=now, run_id=run_id),
        ModelResponse(
            parts=[TextPart(guardrail.reply)],
            model_name="durable-chat",
            timestamp=now,
            run_id=run_id,
            metadata={BLOCKED_BY: guardrail.name},
        ),
    ]


def without_blocked_turns(messages: list[ModelMessage]) -> list[ModelMessage]:
    """`messages` without the blocked turns: each guardrail reply and the request it answered (the
    same list when there is none)."""
    if not _any_blocked(messages):
        return messages
    return _kept_after([], messages)


def _kept_after(kept: list[ModelMessage], messages: Sequence[ModelMessage]) -> list[ModelMessage]:
    """`kept` (what was kept of the messages before `messages`), then what is kept of `messages`."""
    for message in messages:
        if isinstance(message, ModelResponse) and message.metadata and BLOCKED_BY in message.metadata:
            if kept and isinstance(kept[-1], ModelRequest):
                kept.pop()
            continue
        kept.append(message)
    return kept


def _any_blocked(messages: Sequence[ModelMessage]) -> bool:
    # A comprehension, no call per message: every model request resends the whole history.
    return bool(
        [
            message
            for message in messages
            if isinstance(message, ModelResponse) and message.metadata and BLOCKED_BY in message.metadata
        ]
    )


@dataclass
class HideBlockedTurns(AbstractCapability[Any]):
    """Keeps blocked turns out of what the model reads, while the conversation keeps them for the user.

    An injection attempt the input guardrails stopped would otherwise reach the model on the next
    turn, as history. Only the request sent changes (`before_model_request`), not the stored history.
    A run's later requests resend the history its first one sent: only the messages after the ones
    seen before (the same objects) are looked at again, so a run's hooks have one of their own.
    """

    _seen: list[ModelMessage] = field(default_factory=list[ModelMessage], repr=False)
    """The messages of the last request."""
    _kept: list[ModelMessage] | None = field(default=None, repr=False)
    """What was kept of them; `None`: all of them (no blocked turn)."""

    @classmethod
    def get_serialization_name(cls) -> str | None:
        return None  # configured in code, not from an agent spec

    async def before_model_request(
        self, ctx: RunContext[Any], request_context: ModelRequestContext
    ) -> ModelRequestContext:
        request_context.messages = self.without_blocked_turns(request_context.messages)
        return request_context

    def without_blocked_turns(self, messages: list[ModelMessage]) -> list[ModelMessage]:
        """`without_blocked_turns(messages)`, looking only at the messages after those seen before."""
        seen, kept = self._seen, self._kept
        known = len(seen)
        if known > len(messages) or not all(map(operator.is_, messages[:known], seen)):  # walked in C
            known, kept = 0, None
        rest = messages[known:]
        self._seen = list(messages)
        if kept is None and not _any_blocked(rest):
            self._kept = None
            return messages
        self._kept = _kept_after(list(messages[:known]) if kept is None else list(kept), rest)
        return list(self._kept)
