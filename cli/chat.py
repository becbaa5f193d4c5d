"""`durable-chat chat`: a terminal chat that runs the agent in this process, on the database.

No server is involved: each message queues a run and `run_step` drives it here, streaming to the
terminal what it stores, as a server streams to its clients: a crash never leaves on the screen
what the thread does not hold. A run that pauses for approval ends as it would on the server; the chat asks y/n for each
pending call, and the decision that completes the set starts the resume run, driven the same way.
Everything is in the database, so `--thread ID` continues a thread after a restart, a crash, or a
chat that was left at an approval question.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import threading
from collections.abc import AsyncGenerator, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TextIO

from agent import ChatApp, Runtime, RuntimeOptions, decide, open_runtime, run_step
from store import Approval, Database, StoreError, Thread
from stream import StoredEvent, StreamEvent

from .terminal import USER, TerminalSink, call_text, conversation_lines

__all__ = ("DEFAULT_USER", "EndOfInput", "chat", "read_line")

DEFAULT_USER = "demo"
QUIT = "/quit"
_TITLE = "Terminal chat"


class EndOfInput(Exception):
    """The user closed the input (EOF) or typed `/quit`."""


async def read_line(prompt: str) -> str:
    """`input(prompt)` without blocking the event loop.

    The read runs in a daemon thread rather than `asyncio.to_thread`: a worker of the default
    executor is joined at exit, so Ctrl-C at a prompt would hang until the user pressed Enter.

    Raises:
        EndOfInput: The input is closed.
    """
    loop = asyncio.get_running_loop()
    answer: asyncio.Future[str] = loop.create_future()

    def settle(line: str | None, error: BaseException | None) -> None:
        if answer.done():
            return
        if error is not None:
            answer.set_exception(error)
        else:
            answer.set_result(line or "")

    def deliver(line: str | None, error: BaseException | None) -> None:
        # The loop may have closed while we read: then nobody waits for the line any more.
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(settle, line, error)

    def read() -> None:
        try:
            line = input(prompt)
        except EOFError:
            deliver(None, EndOfInput())
        except BaseException as error:  # e.g. a closed stdin: the chat ends with it, not this thread
            deliver(None, error)
        else:
            deliver(line, None)

    threading.Thread(target=read, name="durable-chat-input", daemon=True).start()
    return await answer


class _Printer:
    """Prints a thread's events once they are stored: the runtime's publisher, as the server's broker is."""

    def __init__(self, sink: TerminalSink) -> None:
        self._sink = sink
        self._events: list[StreamEvent] = []
        self._task: asyncio.Task[None] | None = None

    def publish(self, thread_id: str, events: Sequence[StoredEvent]) -> None:
        # In a task of its own, in order: publishing never waits for the terminal.
        self._events.extend(stored.event for stored in events)
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._print(), name="terminal printer")

    async def drain(self) -> None:
        """Wait until every event published so far is printed."""
        if self._task is not None:
            await self._task

    async def _print(self) -> None:
        while self._events:
            event = self._events.pop(0)
            await self._sink.emit(event)
        await self._sink.flush()


@dataclass
class _Chat:
    db: Database
    runtime: Runtime
    thread: Thread
    user_id: str
    printer: _Printer
    out: TextIO

    async def loop(self) -> None:
        while True:
            text = (await read_line(USER)).strip()
            if not text:
                continue
            if text == QUIT:
                raise EndOfInput
            try:
                run, _ = await self.db.runs.create_message_run(self.thread.thread_id, content=text)
            except StoreError as error:
                self._say(f"(cannot send: {error})")
                continue
            await self.drive(run.run_id)

    async def drive(self, run_id: str) -> None:
        """Drive a run, then every resume run the user's decisions start, until no call waits."""
        next_run: str | None = run_id
        while next_run is not None:
            async with _heartbeat(self.db):
                await run_step(self.runtime, next_run)
            await self.printer.drain()
            next_run = await self.decide_pending()

    async def decide_pending(self) -> str | None:
        """Ask for a decision on every pending call; return the resume run the last one started."""
        resume: str | None = None
        pending = await self.db.approvals.list(thread_id=self.thread.thread_id, status="pending")
        for approval in pending:
            decision, reason = await self._ask(approval)
            try:
                result = await decide(
                    self.db,
                    self.thread.thread_id,
                    approval.tool_call_id,
                    decision=decision,
                    decided_by=self.user_id,
                    reason=reason,
                )
            except StoreError as error:  # decided meanwhile, e.g. in the browser
                self._say(f"(cannot decide on {approval.tool_name}: {error})")
                continue
            resume = result.resume_run_id or resume
        return resume

    async def _ask(self, approval: Approval) -> tuple[Literal["approved", "rejected"], str | None]:
        question = f"Approve {call_text(approval.tool_name, approval.args)}? [y/n] "
        while True:
            answer = (await read_line(question)).strip().lower()
            if answer in {"y", "yes"}:
                return "approved", None
            if answer in {"n", "no"}:
                reason = (await read_line("Reason: ")).strip()
                return "rejected", reason or None
            if answer == QUIT:
                raise EndOfInput

    def _say(self, text: str) -> None:
        self.out.write(text + "\n")
        self.out.flush()


async def chat(
    app: ChatApp[Any],
    database_url: str,
    *,
    options: RuntimeOptions | None = None,
    user_id: str | None = None,
    thread_id: str | None = None,
    out: TextIO | None = None,
) -> int:
    """Chat with `app` in the terminal until `/quit` or end of input; return the exit status.

    Args:
        app: The app to chat with.
        database_url: The database to chat on.
        options: How the app runs (its model, tracing); the defaults otherwise.
        user_id: Who chats; by default the thread's owner, or `demo` for a new thread.
        thread_id: Continue this thread (its owner must be `user_id`, when given) instead of a new one.
        out: Where to print; standard output by default.

    Raises:
        store.StoreError: The database cannot be opened, or the thread is not found.
    """
    terminal = sys.stdout if out is None else out
    printer = _Printer(TerminalSink(terminal))
    async with open_runtime(app, database_url, options=options, publish=printer.publish) as runtime:
        db = runtime.db
        if thread_id is None:
            user_id = user_id or DEFAULT_USER
            thread = await db.threads.create(user_id=user_id, title=_TITLE)
        else:
            thread = await db.threads.get(thread_id, user_id=user_id)
            user_id = thread.user_id
        session = _Chat(db, runtime, thread, user_id, printer, terminal)
        terminal.write(
            f"durable-chat: thread {thread.thread_id} (user {user_id!r}); "
            f"continue it with --thread {thread.thread_id}; {QUIT} or Ctrl-D to leave\n"
        )
        terminal.flush()
        try:
            if thread_id is not None:
                await _resume(session)
            await session.loop()
        except EndOfInput:
            terminal.write("\n")
            terminal.flush()
        return 0


@contextlib.asynccontextmanager
async def _heartbeat(db: Database) -> AsyncGenerator[None]:
    """Renew this process's leases while a run goes on, as a server's runner does, so a server
    sharing the database does not take a long turn over."""

    async def beat() -> None:
        while True:
            await asyncio.sleep(db.leases.worker.lease.total_seconds() / 3)
            with contextlib.suppress(StoreError):  # the next beat tries again; the lease has slack
                await db.leases.heartbeat()

    task = asyncio.create_task(beat(), name="heartbeat")
    try:
        yield
    finally:
        task.cancel()
        await asyncio.wait([task])


async def _resume(session: _Chat) -> None:
    """Show the stored conversation, then finish what it left: an interrupted run, pending calls."""
    conversation = await session.db.conversations.load(session.thread.thread_id)
    lines = conversation_lines(conversation.messages) if conversation is not None else []
    for line in lines:
        session.out.write(line + "\n")
    session.out.flush()
    active = await session.db.runs.active(session.thread.thread_id)
    if active is not None:
        await session.drive(active.run_id)
        return
    resume = await session.decide_pending()
    if resume is not None:
        await session.drive(resume)
