"""`Texts`: what users see when durable-chat answers in place of the model."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ("Texts",)


@dataclass(frozen=True, kw_only=True)
class Texts:
    """The replies and notices an app may reword; the defaults name no product or domain."""

    blocked: str = "I'm sorry, I can't help with that request. Please ask me something within what I'm here to help with."
    """The reply to a message the prompt-injection guardrail blocked."""
    rate_limited: str = (
        "You're sending messages faster than I can answer them. Please wait a minute, then try again."
    )
    """The reply to a message beyond the user's message rate."""
    withheld: str = (
        "I'm sorry, something went wrong on our side while answering. Please try again, or ask me "
        "something else."
    )
    """What replaces a reply the leak guardrail stopped."""
    turn_limit: str = (
        "I'm sorry, I couldn't finish this request: it took more steps than I'm allowed. "
        "Please rephrase it or ask for something more specific."
    )
    """The reply of a turn that reached its usage limits (it was looping)."""
    failed: str = "The assistant hit an unexpected problem and stopped. Please try again."
    """The error of a run that failed."""
    unavailable: str = "The assistant is unavailable right now. Please try again in a moment."
    """The error of a run whose model kept failing with transient errors."""
