"""The composition root: a `ChatApp` on a database, as the step drives it.

The server, the terminal chat, the tests and the benchmarks all build their runtime with
`open_runtime`, so the wiring exists once.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from opentelemetry import trace
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.capabilities.instrumentation import Instrumentation
from pydantic_ai.exceptions import UserError
from pydantic_ai.models import Model, infer_model

from store import ConnectionOptions, Database, Worker

from .app import ChatApp
from .eventlog import Publisher
from .guardrails import Guardrails, default_guardrails
from .tool_failures import ToolFailures
from .tracing import instrumentation, traces_children

__all__ = ("QUIET_RUNS", "Runtime", "RuntimeOptions", "UnknownModel", "open_runtime", "resolve_model")


class UnknownModel(ValueError):
    """`--model` names a model neither the app nor pydantic-ai knows."""


@dataclass(frozen=True, kw_only=True)
class RuntimeOptions:
    """How a deployment runs an app, from its settings."""

    model: str | None = None
    """Overrides the app agent's model: a name from `ChatApp.models`, or a pydantic-ai model
    string; `None` keeps the agent's own."""
    messages_per_minute: int | None = 30
    """The default input guardrail's per-user message rate (`None`: no limit); an app with its own
    guardrails ignores it."""
    trace_content: bool = False
    """Put prompts, completions and tool arguments in the agent's spans."""
    trace_agent: bool = True
    """Give the agent pydantic-ai's instrumentation (in the runs whose traces are sampled); off
    when the process exports no spans, so that a run pays nothing for them."""
    connection: ConnectionOptions | None = None
    worker: Worker | None = None
    """This process's identity and lease length for claiming runs."""
    files_url: str | None = None
    """Where files' bytes are kept (`store.blobs.open_blobs`); the database by default."""
    event_interval: float = 0.05
    """The least time, in seconds, between the starts of two transactions of a run's event writer
    (group commit, `EventLogSink`)."""
    busy_event_interval: float = 0.25
    """The most `event_interval` grows to while the process drives more than `QUIET_RUNS` runs (it
    grows with their number): a busy process's writers commit about as often in all as a quiet one's."""


QUIET_RUNS = 2
"""While a runtime drives at most this many runs, its event writers' transactions run where they are
quickest (on SQLite, the event loop's thread), and, when it publishes its runs live, the first word
of a reply is stored (and so shown) at once, not with the events around it: one more transaction,
when the process can afford it and has followers to show it to."""


@dataclass(kw_only=True)
class Runtime:
    """What a step needs besides the run: the database, the app and where events go live."""

    db: Database
    app: ChatApp[Any]
    guardrails: Guardrails
    """The app's, or the defaults with the deployment's message rate."""
    tool_failures: ToolFailures
    model: Model | None = None
    """Overrides the app agent's model for every run."""
    trace_content: bool = False
    trace_agent: bool = True
    """Give the agent pydantic-ai's instrumentation in the runs whose traces are sampled."""
    publish: Publisher | None = None
    files_url: str | None = None
    """Where files' bytes are kept (`store.blobs.open_blobs`); the database by default."""
    event_interval: float = 0.05
    """See `RuntimeOptions.event_interval`."""
    busy_event_interval: float = 0.25
    """See `RuntimeOptions.busy_event_interval`."""
    stopping: asyncio.Event = field(default_factory=asyncio.Event)
    """Set at shutdown: each run stops at its next checkpoint and goes back to the queue."""
    running: int = field(default=0, init=False)
    """How many runs `run_step` drives on this runtime now (`quiet` while at most `QUIET_RUNS`)."""
    instrumentation: Instrumentation | None = field(init=False, repr=False)
    """pydantic-ai's tracing capability, built once per runtime: each build creates six histograms on
    the global meter that are never freed (a leak a run when built per run; see `docs/benchmarks.md`)."""

    def __post_init__(self) -> None:
        self.instrumentation = (
            instrumentation(include_content=self.trace_content) if self.trace_agent else None
        )

    def event_pace(self) -> float:
        """The least time between two transactions of a run's event writer now: `event_interval`
        while quiet, else that times the runs driven per `QUIET_RUNS`, up to `busy_event_interval`."""
        interval = self.event_interval
        if self.running <= QUIET_RUNS:
            return interval
        return max(interval, min(interval * self.running / QUIET_RUNS, self.busy_event_interval))

    def quiet(self) -> bool:
        """Whether this runtime drives few runs now: at most `QUIET_RUNS`."""
        return self.running <= QUIET_RUNS

    @classmethod
    def of(
        cls, app: ChatApp[Any], db: Database, *, options: RuntimeOptions, publish: Publisher | None = None
    ) -> Runtime:
        """The runtime of `app` on an open database (see `open_runtime`)."""
        guardrails = app.guardrails or default_guardrails(
            messages_per_minute=options.messages_per_minute, texts=app.texts
        )
        return cls(
            db=db,
            app=app,
            guardrails=guardrails,
            tool_failures=ToolFailures(
                timeout=app.tool_timeout,
                approved_timeout=app.approved_tool_timeout,
                timeouts=app.tool_timeouts,
            ),
            model=resolve_model(app, options.model),
            trace_content=options.trace_content,
            trace_agent=options.trace_agent,
            publish=publish,
            event_interval=options.event_interval,
            busy_event_interval=options.busy_event_interval,
        )

    def agent_tracing(self) -> list[AbstractCapability[Any]]:
        """The capabilities tracing the agent in the current run: none unless its trace is sampled."""
        if self.instrumentation is None or not traces_children(trace.get_current_span()):
            return []
        return [self.instrumentation]


def resolve_model(app: ChatApp[Any], name: str | None) -> Model | None:
    """What `--model NAME` means for `app`: one of its named models, else a pydantic-ai model string,
    built now so that a missing provider package or API key shows at start, not at the first message.

    Raises:
        UnknownModel: The name is neither, or its provider cannot be set up here.
    """
    if name is None:
        return None
    if name in app.models:
        return app.models[name]()
    if ":" not in name:
        offered = ", ".join(sorted(app.models)) or "none"
        raise UnknownModel(
            f"unknown model {name!r}: give a pydantic-ai model string such as 'openai:gpt-4o' "
            f"(this app's own model names: {offered})"
        )
    try:
        return infer_model(name)
    except (ImportError, UserError) as error:  # no such provider, its package or its API key is missing
        raise UnknownModel(f"cannot use model {name!r}: {error}") from error


@asynccontextmanager
async def open_runtime(
    app: ChatApp[Any],
    database_url: str,
    *,
    options: RuntimeOptions | None = None,
    publish: Publisher | None = None,
) -> AsyncGenerator[Runtime]:
    """Open the database (creating or upgrading its schema), run the app's setup hook, and yield
    the runtime; the database closes on exit.

    Raises:
        UnknownModel: `options.model` names no model.
        store.StoreError: The database cannot be opened.
    """
    options = RuntimeOptions() if options is None else options
    db = await Database.connect(
        database_url, options=options.connection, worker=options.worker, files_url=options.files_url
    )
    try:
        await app.start(db.engine)
        yield Runtime.of(app, db, options=options, publish=publish)
    finally:
        await db.aclose()
