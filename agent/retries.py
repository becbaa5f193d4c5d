"""Retries of transient model errors, with bounded exponential backoff and jitter.

pydantic-ai 2.68 offers retries at the HTTP transport (`pydantic_ai.retries`, tenacity), which
only a provider model built on its own HTTP client can use, and the `on_model_request_error`
capability hook, which sees every failed attempt at a model request of any model and may ask for
another one (`RetryModelRequest`). `ModelRetries` is that hook, so it covers the demo and test
models as well as real providers.

A streamed request is retried only if nothing of it was streamed yet: with such a hook, pydantic-ai
opens each attempt's stream and pulls its first event before handing it over, so a failure to open
it, or one the provider reports before any output, reaches the hook; a failure after output was
streamed propagates, and the run ends `failed` (see `agent.step`), its conversation as its last
checkpoint left it.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from pydantic_ai import RunContext
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.exceptions import (
    ModelAPIError,
    ModelConnectionError,
    ModelHTTPError,
    ModelRateLimitError,
    ModelRequestTimeout,
    ModelServerError,
    ModelUnavailableError,
    RetryModelRequest,
)
from pydantic_ai.messages import ModelResponse
from pydantic_ai.models import ModelRequestContext

__all__ = ("ModelRetries", "is_transient")

logger = logging.getLogger(__name__)


def is_transient(error: BaseException) -> bool:
    """Whether sending the same request again may succeed: rate limits, server errors, timeouts."""
    if isinstance(error, ModelHTTPError):
        return error.status_code in (408, 429) or error.status_code >= 500
    return isinstance(
        error,
        (
            ModelRateLimitError,
            ModelUnavailableError,
            ModelServerError,
            ModelConnectionError,
            ModelRequestTimeout,
            TimeoutError,
        ),
    )


@dataclass
class ModelRetries(AbstractCapability[Any]):
    """Retries a model request that failed transiently, up to `attempts` attempts in all.

    The wait before attempt n+1 is `base_delay * 2**(n-1)`, capped at `max_delay`, less a random
    share of up to `jitter` of it (so many runs failing at once do not retry in step); a provider's
    `retry_after` is honoured when it asks for longer, within `max_delay`.
    """

    attempts: int = 4
    base_delay: float = 0.5
    max_delay: float = 8.0
    jitter: float = 0.5
    sleep: Callable[[float], Awaitable[None]] = field(default=asyncio.sleep, repr=False)
    """How to wait; tests pass one that records the delays."""

    @classmethod
    def get_serialization_name(cls) -> str | None:
        return None  # configured in code, not from an agent spec

    def delay(self, attempt: int, error: BaseException) -> float:
        """The wait after failed attempt number `attempt` (1 for the first)."""
        backoff = min(self.max_delay, self.base_delay * 2 ** (attempt - 1))
        backoff -= backoff * self.jitter * random.random()
        asked = error.retry_after if isinstance(error, ModelAPIError) else None
        if asked is not None:
            backoff = max(backoff, min(asked, self.max_delay))
        return backoff

    async def on_model_request_error(
        self, ctx: RunContext[Any], *, request_context: ModelRequestContext, error: Exception
    ) -> ModelResponse:
        attempt = request_context.attempt
        if attempt >= self.attempts or not is_transient(error):
            raise error
        wait = self.delay(attempt, error)
        logger.warning(
            "model request of run %s failed (%s), attempt %d of %d; retrying in %.2fs",
            ctx.run_id,
            type(error).__name__,
            attempt,
            self.attempts,
            wait,
        )
        await self.sleep(wait)
        raise RetryModelRequest()
