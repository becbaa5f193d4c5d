"""`ChatApp`: the seam through which durable-chat serves any pydantic-ai agent, and `RunScope`.

A `ChatApp` describes a deployment: the user's agent (any deps type, any output type), a factory
of its deps called once per run with the run's `RunScope`, and what a deployment tunes around it
(guardrails, limits, timeouts, the texts users see, a setup hook, starter prompts, context for
reviewers). The demo shop is one such app (`agent.demo`); `docs/your-agent.md` builds another.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import AsyncGenerator, Awaitable, Callable, Collection, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, Literal, Protocol, TypeVar

from pydantic_ai import RunContext
from pydantic_ai.agent import AbstractAgent
from pydantic_ai.models import Model
from pydantic_ai.usage import UsageLimits
from sqlalchemy.ext.asyncio import AsyncEngine

from store import upgrade

from .files import ThreadFiles
from .guardrails import Guardrails
from .ledger import ToolLedger
from .records import RunRecords
from .retries import ModelRetries
from .review import Review
from .texts import Texts

logger = logging.getLogger(__name__)

__all__ = (
    "AppContext",
    "ApprovalReview",
    "ChatApp",
    "Delegator",
    "DepsFactory",
    "RunKind",
    "RunScope",
    "default_limits",
)

DepsT = TypeVar("DepsT")

RunKind = Literal["message", "resume", "regenerate", "recover"]
"""Why a run runs: a user's message, decisions on its paused calls, a reply asked again, or the
continuation of a run an earlier attempt left (a crash, a restart, a cancelled task)."""


class Delegator(Protocol):
    """Runs delegated agents for a run (`agent.delegation.Delegations`)."""

    async def delegate(
        self,
        ctx: RunContext[Any],
        agent: AbstractAgent[Any, Any],
        prompt: str,
        *,
        deps: Any,
        name: str | None,
    ) -> Any: ...


@dataclass(frozen=True)
class RunScope:
    """Who and what a run is for, and the services its tools may use; given to the deps factory."""

    thread_id: str
    run_id: str
    user_id: str
    attempt: int
    """1 for a run's first attempt; more when it continues after a crash or a restart."""
    records: RunRecords
    """Saves structured records of the thread (`scope.records.save(ctx, model)`)."""
    ledger: ToolLedger
    """Makes side effects exactly-once per tool call (`scope.ledger.once` / `.external`)."""
    engine: AsyncEngine
    """The database durable-chat runs on, for an app's own tables (effects that share a transaction
    with their ledger row go through `ledger.once` instead)."""
    kind: RunKind = "message"
    """Why the run runs; `recover` for any run's attempt after the first."""
    message: str | None = None
    """The user message the run answers: a `message` run's, the one a `regenerate` run asks again
    (and theirs again when they `recover`); `None` for a `resume` run, which decisions started."""
    files: ThreadFiles = field(default_factory=lambda: ThreadFiles(None, "", ""))
    """The thread's files: list and read them, or save one a tool made (`scope.files.save(...)`)."""
    delegations: Delegator | None = field(default=None, repr=False, compare=False)
    """Runs `delegate`'s sub-runs; set by the step."""

    async def delegate(
        self,
        ctx: RunContext[Any],
        agent: AbstractAgent[Any, Any],
        prompt: str,
        *,
        deps: Any = None,
        name: str | None = None,
    ) -> Any:
        """Run `agent` on `prompt` as a sub-run of the tool call `ctx` runs, and return its output.

        Its events stream to the thread's clients tagged with its name (`name`, else the agent's) and
        the parent call; its messages are checkpointed after every node; its usage counts against the
        run's limits; a call of it that needs approval pauses the whole run, and the decision resumes
        it from storage when this tool runs again. The tool's code before this call runs again then:
        keep side effects in the ledger, or in the delegated agent's own tools.

        Raises:
            RuntimeError: The scope is no run's (a test's hand-made scope).
        """
        if self.delegations is None:
            raise RuntimeError("scope.delegate works inside a run that durable-chat drives")
        return await self.delegations.delegate(ctx, agent, prompt, deps=deps, name=name)


DepsFactory = Callable[
    [RunScope],
    "DepsT | Awaitable[DepsT] | AbstractAsyncContextManager[DepsT] | AsyncGenerator[DepsT, None]",
]
"""Builds an agent's deps for one run: sync or async, or with a lifetime, as an async context
manager (or an async generator with one `yield`) entered before the run and exited after it,
however it ends."""


@dataclass(frozen=True)
class AppContext:
    """What an app's setup hook gets at start: the database, and a way to migrate its own tables."""

    engine: AsyncEngine

    async def migrate(self, location: Path, *, version_table: str) -> None:
        """Run the app's own Alembic migrations in `location`, recorded in `version_table`.

        The folder's `env.py` calls `store.migrate.run_environment(the_app_metadata)`; several
        processes starting at once migrate once.
        """
        await upgrade(self.engine, location=location, version_table=version_table)


@dataclass(frozen=True)
class ApprovalReview:
    """A call a reviewer looks at, for `ChatApp.describe_approval`."""

    thread_id: str
    user_id: str
    tool_call_id: str
    tool_name: str
    args: Mapping[str, object]
    engine: AsyncEngine
    metadata: Mapping[str, object] | None = None
    """What the tool said about the call when it held it (`ApprovalRequired(metadata=...)`), if anything."""


ReviewPolicy = Callable[[ApprovalReview], "Review | Awaitable[Review]"]
"""`ChatApp.review`: who decides a call and by when; sync or async, called once per call as its run pauses."""

ApprovalContext = Mapping[str, "str | int | float"]
"""Short facts for the reviewer, label to value, e.g. `{"Refundable": "$24.95"}`."""


def default_limits() -> UsageLimits:
    """A turn that needs more is looping: it ends with a polite message instead."""
    return UsageLimits(request_limit=12, tool_calls_limit=24)


@dataclass(kw_only=True)
class ChatApp(Generic[DepsT]):
    """An agent served by durable-chat, with what the deployment sets around it.

    Approval policy is pydantic-ai's own: tools with `requires_approval=True`, `ApprovalRequired`
    raised inside a tool, toolsets wrapped with `approval_required(...)` all pause the run.
    """

    agent: AbstractAgent[DepsT, Any]
    """Any pydantic-ai agent, run with its output type as written: a run pauses at calls that need
    approval whatever that type is (`agent/pauses.py`)."""
    deps: DepsFactory[DepsT] | None = None
    """Builds the agent's deps once per run (an async context manager or generator: entered before
    it, exited after it); without it the agent gets `None`."""
    name: str | None = None
    """Shown to users (the page's title); the agent's name, or "Assistant", by default."""
    guardrails: Guardrails | None = None
    """`None`: the defaults (prompt injection and the server's message rate on input, leaks on
    output), answering with `texts`."""
    usage_limits: UsageLimits = field(default_factory=default_limits)
    """Per turn; a turn beyond them ends with `texts.turn_limit`."""
    tool_timeout: float | None = 30.0
    """Seconds a tool may run before it gives a `failed` result; `None`: no limit."""
    approved_tool_timeout: float | None = None
    """The same for a call a human approved: by default none, as cutting an approved side effect
    short after it acted would tell the model it failed."""
    tool_timeouts: Mapping[str, float | None] = field(default_factory=dict[str, "float | None"])
    """Per-tool overrides of both (`None`: no limit)."""
    read_only_tools: Collection[str] = frozenset()
    """Tools with no side effects (lookups, searches), by name (kept as a frozenset). Accepted and no
    longer needed: every tool step is stored with its results unless a tool uses the ledger,
    delegates or runs long (`agent/checkpointing.py`), declared or not."""
    texts: Texts = field(default_factory=Texts)
    """What users see when durable-chat answers in place of the model."""
    model_retries: ModelRetries = field(default_factory=ModelRetries)
    """Retries of transient model errors (429, 5xx, timeouts), with backoff."""
    setup: Callable[[AppContext], Awaitable[None] | None] | None = None
    """Runs once at start, before any run (the shop creates and seeds its tables here)."""
    models: Mapping[str, Callable[[], Model]] = field(default_factory=dict[str, Callable[[], Model]])
    """Named models the app offers to `--model` besides pydantic-ai's model strings (the shop: `demo`)."""
    starter_prompts: Sequence[str] = ()
    """Suggestions a client may show on an empty thread."""
    describe_approval: (
        Callable[[ApprovalReview], Awaitable[ApprovalContext | None] | ApprovalContext | None] | None
    ) = None
    """Context for a reviewer looking at a pending call (the shop: what remains refundable)."""
    handoffs: Sequence[AbstractAgent[DepsT, Any]] = ()
    """Agents the conversation can be handed to: every agent (`agent` and these) gets a
    `transfer_to_<name>` tool for each other one; after a transfer the thread's next turns are
    answered by that agent. Each needs a `name`."""
    review: ReviewPolicy | None = None
    """Who decides each held call and by when: `policy(call) -> Review` (`agent.review`), sync or
    async; `None`: the thread's user decides every call, with no deadline."""
    reviewer_roles: Sequence[str] = ()
    """The roles `review` hands calls to, for people and tools: `serve` on a terminal prints a
    reviewer's sign-in link holding them (the staffed shop: `support`, `managers`)."""

    def __post_init__(self) -> None:
        if isinstance(self.read_only_tools, str):
            # A string is a collection of one-letter names: the setting would silently do nothing.
            raise TypeError(
                f"read_only_tools takes tool names, like {{{self.read_only_tools!r}}}, not one string"
            )
        self.read_only_tools = frozenset(self.read_only_tools)
        if isinstance(self.reviewer_roles, str):
            raise TypeError(
                f"reviewer_roles takes role names, like ({self.reviewer_roles!r},), not one string"
            )
        if self.handoffs:
            names = [agent.name for agent in self.speakers]
            if None in names or len(set(names)) != len(names):
                raise ValueError(f"an app with hand-offs needs a distinct name on every agent, got {names!r}")

    @property
    def speakers(self) -> list[AbstractAgent[DepsT, Any]]:
        """The agents that may answer a thread: `agent`, then `handoffs`."""
        return [self.agent, *self.handoffs]

    def speaker(self, name: str | None) -> AbstractAgent[DepsT, Any]:
        """The agent named `name` among `speakers`; `agent` for `None` or a name no longer served."""
        return next((agent for agent in self.handoffs if agent.name == name), self.agent)

    @property
    def title(self) -> str:
        return self.name or self.agent.name or "Assistant"

    def timeout_of(self, tool_name: str, *, approved: bool) -> float | None:
        if tool_name in self.tool_timeouts:
            return self.tool_timeouts[tool_name]
        return self.approved_tool_timeout if approved else self.tool_timeout

    @asynccontextmanager
    async def deps_for(self, scope: RunScope) -> AsyncGenerator[DepsT | None]:
        """The deps of one run, for as long as it runs: from the factory, sync or async, entered and
        exited when the factory gives an async context manager or an async generator.

        The exit sees why the run ended (a failure, a cancellation, the worker stopping) and cannot
        swallow it; after a run that ended well, its end stored already, a failing exit is logged.
        """
        if self.deps is None:
            yield None
            return
        made = self.deps(scope)
        if inspect.isasyncgen(made):
            # `isasyncgen` narrows to a generator that takes `Never`: it takes `None` here.
            made = asynccontextmanager(_given)(made)  # pyright: ignore[reportUnknownArgumentType, reportArgumentType]
        if not isinstance(made, AbstractAsyncContextManager):
            yield (await made) if inspect.isawaitable(made) else made  # pyright: ignore[reportReturnType]
            return
        lifetime: AbstractAsyncContextManager[DepsT] = made  # pyright: ignore[reportUnknownVariableType]
        entered = await lifetime.__aenter__()
        try:
            yield entered
        except BaseException as error:
            await lifetime.__aexit__(type(error), error, error.__traceback__)
            raise
        try:
            await lifetime.__aexit__(None, None, None)
        except Exception:
            logger.exception("the deps of run %s failed to close", scope.run_id)

    async def start(self, engine: AsyncEngine) -> None:
        """Run the setup hook, once, before the app serves."""
        if self.setup is None:
            return
        done = self.setup(AppContext(engine))
        if inspect.isawaitable(done):
            await done

    async def context_for(self, review: ApprovalReview) -> dict[str, str | int | float] | None:
        """The reviewer's context for a call, or `None` when the app gives none (or its hook fails:
        the decision matters more than its context, so a failing hook is logged, not raised)."""
        if self.describe_approval is None:
            return None
        try:
            described = self.describe_approval(review)
            if inspect.isawaitable(described):
                described = await described
        except Exception:
            logger.warning(
                "describe_approval failed for %s %s", review.tool_name, review.tool_call_id, exc_info=True
            )
            return None
        return None if described is None else dict(described)


def _given(generator: AsyncGenerator[Any, None]) -> AsyncGenerator[Any, None]:
    return generator
