"""A run's output guardrails: model text is held back while it could still trip one, and withdrawn if it does.

Deliberate choices (the design note is "Guardrails" in `docs/agent.md`):

- **Checked as it streams** (`text_delta`): each delta goes through a `HeldPart`, and only what no
  guardrail can trip on any more is emitted; a leak never leaves the server, not even to a live
  viewer. A part a scanner trips on gets `guardrail_tripped` (stage `output`) and `text_withdrawn`
  (its part id and the replacement) at once, and nothing more of it; clients replace what they
  showed of it, which held no match.
- **Checked whole when it completes** (`text_done`), with every guardrail's `check`: the final
  word, and the only one of a guardrail without a scanner (which held the whole part back). A
  passing part gets its held tail and `text_done`; a tripping one is withdrawn instead of
  `text_done`. The check runs per part, so a pattern split over two parts of one response is not
  seen; models write a reply as one part.
- **The response is changed before anything acts on it.** When the run reaches the node that
  handles a response (`settle`), each withdrawn part's content becomes the replacement, in the
  response pydantic-ai holds: the run's output is the replacement, the checkpoint stores it, and
  the model never reads the leaked text back on later turns. A part no event completed is checked
  there. Every save also scrubs what it stores (`scrub`), for the ends that skip that node (a
  usage limit).
- **Shown text withdrawn at the end is blanked in the log** (`blank`, in the transaction of the
  checkpoint that stores the replacement): only a tripping `check` that no scanner foresaw (a
  pattern that matches only once the whole part is normalized together) can withdraw text that
  was shown; its `text_delta` events keep their ids and type, their delta becomes `""`. A delegated
  agent's guard (`delegated`) shares its run's list of parts to blank: its own checkpoint blanks
  what is stored by then, and the run's next checkpoint what was still held back with a result.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import TypedDict

from pydantic_ai import CallToolsNode
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart
from sqlalchemy.ext.asyncio import AsyncConnection

from store import overwrite_events
from stream import GuardrailTripped, Sink, TextDelta, TextDone, TextWithdrawn, event_data

from .eventlog import EventLogSink
from .guardrails import Guardrail, GuardrailContext, first_tripped
from .holdback import HeldPart

__all__ = ("WITHDRAWN", "EventTags", "OutputGuard")

WITHDRAWN = "withdrawn"
"""The `metadata` key of a stored reply whose text an output guardrail replaced."""

logger = logging.getLogger(__name__)


class EventTags(TypedDict):
    """What every event of one agent run carries besides its own fields."""

    run_id: str
    agent: str | None
    parent_tool_call_id: str | None
    trace_id: str | None


class OutputGuard:
    """The output guardrails of one run; see the module's notes."""

    def __init__(
        self,
        guardrails: Sequence[Guardrail],
        context: GuardrailContext,
        out: Sink,
        log: EventLogSink,
        *,
        agent: str | None = None,
        parent_tool_call_id: str | None = None,
        trace_id: str | None = None,
    ) -> None:
        self.tags = EventTags(
            run_id=context.run_id, agent=agent, parent_tool_call_id=parent_tool_call_id, trace_id=trace_id
        )
        """The tags of the events of the run the guard watches, set as each event is made (no sink
        copies an event to add one): `agent` may change (a hand-off's speaker)."""
        self._guardrails = guardrails
        self._context = context
        self._out = out
        self._log = log
        self._parts: dict[str, HeldPart] = {}
        """The text parts streaming now."""
        self._delta_ids: dict[str, list[int]] = {}
        """The event ids of the deltas emitted for each part not completed yet."""
        self._passed: set[str] = set()
        self._withdrawn: dict[str, str] = {}
        """Each withdrawn text, with its replacement."""
        self._blanked: list[tuple[TextDelta, list[int]]] = []
        """The delta ids of each part withdrawn after some of it was shown, to blank in the log,
        with the blank delta that replaces them (shared with the guards of delegated agents)."""

    def delegated(self, agent: str, parent_tool_call_id: str) -> OutputGuard:
        """The guard of a delegated agent's sub-run: the same guardrails, its own tags, this run's blanking."""
        guard = OutputGuard(
            self._guardrails,
            self._context,
            self._out,
            self._log,
            agent=agent,
            parent_tool_call_id=parent_tool_call_id,
            trace_id=self.tags["trace_id"],
        )
        guard._blanked = self._blanked
        return guard

    async def text_delta(self, part_id: str, delta: str) -> None:
        """A piece of a text part: emit what no guardrail can trip on any more, or withdraw the part."""
        part = self._parts.get(part_id)
        if part is None:
            part = self._parts[part_id] = HeldPart(self._guardrails)
        elif part.tripped is not None:
            return  # withdrawn already
        showable = part.feed(delta)
        if part.tripped is not None:
            await self._withdraw(part_id, part.tripped, shown_safe=True)
        elif showable:
            await self._emit_delta(part_id, showable)

    async def text_done(self, part_id: str, text: str) -> None:
        """A text part is complete: send its held tail and `text_done`, or withdraw it if it trips a guardrail."""
        part = self._parts.pop(part_id, None) or HeldPart(self._guardrails)
        if part.tripped is not None:
            self._withdrawn[text] = part.tripped.reply
            self._delta_ids.pop(part_id, None)
            return
        guardrail = await self._check(text)
        if guardrail is None:
            rest = part.rest(text)
            if rest:
                await self._emit_delta(part_id, rest)
            self._delta_ids.pop(part_id, None)
            await self._out.emit(TextDone(**self.tags, part_id=part_id, text=text))
        else:
            self._withdrawn[text] = guardrail.reply
            # No scanner foresaw this trip: what was shown of the part may hold the match.
            await self._withdraw(part_id, guardrail, shown_safe=False)

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
                    self._withdrawn[part.content] = guardrail.reply
                    await self._withdraw(part_id(index), guardrail, shown_safe=True)
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

    @property
    def blanking(self) -> bool:
        """Whether `blank` has deltas to blank, so that a checkpoint must call it."""
        return bool(self._blanked)

    async def blank(self, connection: AsyncConnection) -> None:
        """Blank the stored deltas of parts withdrawn after some of them was shown, inside a checkpoint's transaction.

        Every checkpoint does it again: it is idempotent, and such a withdrawal is rare.
        """
        for empty, event_ids in self._blanked:
            await overwrite_events(connection, self._context.thread_id, event_ids, event_data(empty))

    async def _emit_delta(self, part_id: str, delta: str) -> None:
        await self._out.emit(TextDelta(**self.tags, part_id=part_id, delta=delta))
        self._delta_ids.setdefault(part_id, []).append(self._log.last_id)

    async def _check(self, text: str) -> Guardrail | None:
        if text in self._passed:
            return None
        guardrail = await first_tripped(self._guardrails, text, self._context)
        if guardrail is None:
            self._passed.add(text)
        return guardrail

    async def _withdraw(self, part_id: str, guardrail: Guardrail, *, shown_safe: bool) -> None:
        """Withdraw a part; `shown_safe`: what was shown of it holds no match (else it is blanked in the log)."""
        logger.warning(
            "output guardrail %s withdrew part %s of run %s", guardrail.name, part_id, self._context.run_id
        )
        shown = self._delta_ids.pop(part_id, [])
        if shown and not shown_safe:
            self._blanked.append((TextDelta(**self.tags, part_id=part_id, delta=""), shown))
        await self._out.emit(GuardrailTripped(**self.tags, guardrail=guardrail.name, stage="output"))
        await self._out.emit(TextWithdrawn(**self.tags, part_id=part_id, replacement=guardrail.reply))


def _mark_withdrawn(response: ModelResponse) -> None:
    # Kept with the reply (never sent to the model), so a client reloading the thread can say so.
    response.metadata = {**(response.metadata or {}), WITHDRAWN: True}
