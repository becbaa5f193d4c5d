"""A run's output guardrails: model text they trip on is withdrawn everywhere it went.

Deliberate choices:

- **Checked as each text part completes**, before its `text_done`: a part that trips an output
  guardrail gets `guardrail_tripped` (stage `output`) and `text_withdrawn` (its part id and the
  replacement) *instead of* `text_done`. Its deltas were already streamed live and cannot be
  unsent; `text_withdrawn` tells clients to drop them and show the replacement (the page and the
  terminal chat do). The check runs on whole parts, so a pattern split over two parts of one
  response is not seen; models write a reply as one part.
- **The response is changed before anything acts on it.** When the run reaches the node that
  handles a response (`settle`), each withdrawn part's content becomes the replacement, in the
  response pydantic-ai holds: the run's output is the replacement, the checkpoint stores it, and
  the model never reads the leaked text back on later turns. A part no event completed is checked
  there. Every save also scrubs what it stores (`scrub`), for the ends that skip that node (a
  usage limit).
- **Stored deltas are blanked in the same transaction that stores the replacement** (`blank`,
  called by each checkpoint): a withdrawn part's `text_delta` events keep their ids and type but
  their delta becomes `""`, so a replay from the log shows only the replacement. Until that
  checkpoint commits (milliseconds for a final reply) a reader of the log could still see the
  deltas, followed by the withdrawal; a crash in between leaves them in the log, never in the
  conversation.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from pydantic_ai import CallToolsNode
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart
from sqlalchemy.ext.asyncio import AsyncConnection

from store import overwrite_events
from stream import GuardrailTripped, Sink, StreamEvent, TextDelta, TextDone, TextWithdrawn, event_data

from .eventlog import EventLogSink
from .guardrails import Guardrail, GuardrailContext, first_tripped

__all__ = ("WITHDRAWN", "OutputGuard")

WITHDRAWN = "withdrawn"
"""The `metadata` key of a stored reply whose text an output guardrail replaced."""

logger = logging.getLogger(__name__)


class OutputGuard:
    """The output guardrails of one run; see the module's notes."""

    def __init__(
        self, guardrails: Sequence[Guardrail], context: GuardrailContext, out: Sink, log: EventLogSink
    ) -> None:
        self._guardrails = guardrails
        self._context = context
        self._out = out
        self._log = log
        self._delta_ids: dict[str, list[int]] = {}
        """The event ids of the deltas streamed for each part not completed yet."""
        self._passed: set[str] = set()
        self._withdrawn: dict[str, str] = {}
        """Each withdrawn text, with its replacement."""
        self._blanked: list[tuple[str, list[int]]] = []
        """The delta ids of each withdrawn part, to blank in the log."""

    def track(self, out: Sink) -> Sink:
        """`out`, noting the log id of every text delta that goes through it (the log comes first)."""
        return _Tracking(out, self._log, self._delta_ids)

    async def text_done(self, part_id: str, text: str) -> None:
        """A text part is complete: send `text_done`, or withdraw it if it trips a guardrail."""
        guardrail = await self._check(text)
        if guardrail is None:
            self._delta_ids.pop(part_id, None)
            await self._out.emit(TextDone(run_id=self._context.run_id, part_id=part_id, text=text))
        else:
            await self._withdraw(part_id, text, guardrail)

    async def settle(self, node: object, part_id: Callable[[int], str]) -> None:
        """Before the run handles a model response: put replacements in place of withdrawn parts."""
        if not isinstance(node, CallToolsNode):
            return
        response: ModelResponse = node.model_response  # pyright: ignore[reportUnknownMemberType]
        for index, part in enumerate(response.parts):
            if not isinstance(part, TextPart) or not part.content:
                continue
            if part.content not in self._withdrawn and part.content not in self._passed:
                # No event completed it (a model that does not stream parts): check it now.
                guardrail = await self._check(part.content)
                if guardrail is not None:
                    await self._withdraw(part_id(index), part.content, guardrail)
            if part.content in self._withdrawn:
                part.content = self._withdrawn[part.content]
                _mark_withdrawn(response)

    def scrub(self, messages: Sequence[ModelMessage]) -> None:
        """Put replacements in place of withdrawn text anywhere in `messages`, before they are stored."""
        if not self._withdrawn:
            return
        for message in messages:
            if isinstance(message, ModelResponse):
                for part in message.parts:
                    if isinstance(part, TextPart) and part.content in self._withdrawn:
                        part.content = self._withdrawn[part.content]
                        _mark_withdrawn(message)

    async def blank(self, connection: AsyncConnection) -> None:
        """Blank the stored deltas of withdrawn parts, inside a checkpoint's transaction.

        Every checkpoint does it again: it is idempotent, and a withdrawal is rare.
        """
        for part_id, event_ids in self._blanked:
            empty = TextDelta(run_id=self._context.run_id, part_id=part_id, delta="")
            await overwrite_events(connection, self._context.thread_id, event_ids, event_data(empty))

    async def _check(self, text: str) -> Guardrail | None:
        if text in self._passed:
            return None
        guardrail = await first_tripped(self._guardrails, text, self._context)
        if guardrail is None:
            self._passed.add(text)
        return guardrail

    async def _withdraw(self, part_id: str, text: str, guardrail: Guardrail) -> None:
        logger.warning(
            "output guardrail %s withdrew part %s of run %s", guardrail.name, part_id, self._context.run_id
        )
        self._withdrawn[text] = guardrail.reply
        self._blanked.append((part_id, self._delta_ids.pop(part_id, [])))
        run_id = self._context.run_id
        await self._out.emit(GuardrailTripped(run_id=run_id, guardrail=guardrail.name, stage="output"))
        await self._out.emit(TextWithdrawn(run_id=run_id, part_id=part_id, replacement=guardrail.reply))


class _Tracking:
    """A sink that passes everything on and notes the log ids of text deltas."""

    def __init__(self, out: Sink, log: EventLogSink, delta_ids: dict[str, list[int]]) -> None:
        self._out = out
        self._log = log
        self._delta_ids = delta_ids

    async def emit(self, event: StreamEvent) -> None:
        await self._out.emit(event)
        if isinstance(event, TextDelta):
            self._delta_ids.setdefault(event.part_id, []).append(self._log.last_id)

    async def flush(self) -> None:
        await self._out.flush()


def _mark_withdrawn(response: ModelResponse) -> None:
    # Kept with the reply (never sent to the model), so a client reloading the thread can say so.
    response.metadata = {**(response.metadata or {}), WITHDRAWN: True}
