"""One streaming text part held back as much as its output guardrails need, and no more.

A streaming guardrail (`guardrails.StreamingGuardrail`) says how much of the part so far it can
never trip on; a guardrail with only `check` can tell nothing before the part is complete, so it
holds the whole part back. What may be shown is the shortest of their answers: a safe reply
streams as it comes, except for a tail that could still become a match, and a leaking reply stops
before its leak. `check` on the complete part stays the final word (`agent.withdrawals`).
"""

from __future__ import annotations

from collections.abc import Sequence

from .guardrails import Guardrail, StreamingGuardrail, TextScanner

__all__ = ("HeldPart",)


class HeldPart:
    """A text part going through output guardrails as it streams."""

    def __init__(self, guardrails: Sequence[Guardrail]) -> None:
        self._scanners: list[tuple[Guardrail, TextScanner | None]] = [
            (guardrail, guardrail.scanner() if isinstance(guardrail, StreamingGuardrail) else None)
            for guardrail in guardrails
        ]
        self.text = ""
        """The part so far."""
        self.shown = 0
        """How many of its first characters were let through."""
        self.tripped: Guardrail | None = None
        """The guardrail a scanner tripped while the part streamed; nothing more is let through."""

    def feed(self, delta: str) -> str:
        """Add the next piece of the part; return what may be shown now ("" for nothing)."""
        if self.tripped is not None:
            return ""
        self.text += delta
        safe = len(self.text)
        for guardrail, scanner in self._scanners:
            if scanner is None:
                safe = 0  # only `check` on the whole part can tell
                continue
            answer = scanner.feed(self.text)
            if answer is None:
                self.tripped = guardrail
                return ""
            safe = min(safe, answer)
        if safe <= self.shown:
            return ""
        showable, self.shown = self.text[self.shown : safe], safe
        return showable

    def rest(self, text: str) -> str:
        """The part is complete as `text` and passed every check: what is still to show."""
        if not text.startswith(self.text[: self.shown]):
            return ""  # the model's part differs from its deltas: `text_done` carries it whole
        return text[self.shown :]
