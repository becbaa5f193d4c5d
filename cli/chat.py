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
import json
import signal
import sys
import threading
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TextIO

from agent import (
    ApprovalReview,
    ChatApp,
    InvalidArguments,
    Opened,
    Runtime,
    RuntimeOptions,
    cancel,
    decide,
    open_runtime,
    queue_run,
    run_step,
)
from store import Approval, Database, NoActiveRun, StoredFile, StoreError, Thread
from stream import StoredEvent, StreamEvent
from worker import holding_leases

from .attach import ATTACH, AttachError, attach_path
from .terminal import USER, TerminalSink, call_text, conversation_lines, fields_line
from .users import DEFAULT_USER

__all__ = ("DEFAULT_USER", "INTERRUPTED", "EndOfInput", "chat", "read_line")

QUIT = "/quit"
INTERRUPTED = 130
"""The exit status after Ctrl-C (128 + SIGINT), as a shell reports it."""


class EndOfInput(Exception):
    """The user closed the input (EOF) or typed `/quit`."""


async def read_line(prompt: str, *, prefill: str = "") -> str:
    """`input(prompt)` without blocking the event loop; `prefill` is put in the line to edit, where readline works.

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
            line = _input(prompt, prefill)
        except EOFError:
            deliver(None, EndOfInput())
        except BaseException as error:  # e.g. a closed stdin: the chat ends with it, not this thread
            deliver(None, error)
        else:
            deliver(line, None)

    threading.Thread(target=read, name="durable-chat-input", daemon=True).start()
    return await answer


def _input(prompt: str, prefill: str) -> str:
    if not prefill or not sys.stdin.isatty():
        return input(prompt)
    try:
        import readline  # not on every platform
    except ImportError:
        return input(prompt)
    readline.set_startup_hook(lambda: readline.insert_text(prefill))
    try:
        return input(prompt)
    finally:
        readline.set_startup_hook()


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
    sink: TerminalSink
    out: TextIO
    ctrl_c: _CtrlC

    async def loop(self) -> None:
        attached: list[StoredFile] = []
        while True:
            text = (await read_line(USER)).strip()
            if not text and not attached:  # Enter alone sends attached files with no text
                continue
            if text == QUIT:
                raise EndOfInput
            if text == ATTACH or text.startswith(ATTACH + " "):
                await self._attach(text.removeprefix(ATTACH).strip(), attached)
                continue
            try:
                # Queued and claimed here at once, as the server's endpoints queue theirs.
                opened = await queue_run(
                    self.runtime,
                    self.thread.thread_id,
                    "message",
                    content=text,
                    claim=True,
                    file_ids=[f.file_id for f in attached],
                )
            except StoreError as error:
                self._say(f"(cannot send: {error})")
                continue
            attached.clear()
            await self.drive(opened.run.run_id, opened)

    async def _attach(self, path: str, attached: list[StoredFile]) -> None:
        """`/attach PATH`: the file goes with the next message."""
        if not path:
            self._say("(usage: /attach PATH; the file goes with your next message)")
            return
        try:
            stored = await attach_path(self.db, self.thread.thread_id, self.user_id, Path(path))
        except AttachError as error:
            self._say(f"(cannot attach: {error})")
            return
        attached.append(stored)
        self._say(
            f"(attached {stored.name}, {stored.media_type}, {stored.size} bytes: it goes with your next message; Enter alone sends it now)"
        )

    async def drive(self, run_id: str, opened: Opened | None = None) -> None:
        """Drive a run, then every resume run the user's decisions start, until no call waits.

        `opened`: the run `run_id` as `queue_run` opened it here. Ctrl-C stops the run (it ends
        `cancelled`, its partial reply kept); a second one leaves.
        """
        next_run: str | None = run_id
        while next_run is not None:
            if await self._stopped_by_user(next_run, opened):
                return
            next_run, opened = await self.decide_pending(), None

    async def _stopped_by_user(self, run_id: str, opened: Opened | None) -> bool:
        """Drive one run; whether Ctrl-C stopped it."""
        task = asyncio.create_task(self._step(run_id, opened), name=f"run {run_id}")
        interrupted = False

        def interrupt() -> None:
            nonlocal interrupted
            interrupted = True
            task.cancel()

        with self.ctrl_c.stopping(interrupt):
            await asyncio.wait([task])
        if not interrupted or not task.cancelled():
            task.result()
            return False
        self.sink.stop_spinner()
        with contextlib.suppress(NoActiveRun):  # it ended on its own meanwhile
            # Its `run_finished` is printed as the stored events are: "(stopped: …)".
            await cancel(self.db, self.thread.thread_id, publish=self.printer.publish)
        await self.printer.drain()
        return True

    async def _step(self, run_id: str, opened: Opened | None) -> None:
        async with holding_leases(self.db):
            if opened is None:
                await run_step(self.runtime, run_id)
            else:
                await run_step(self.runtime, run_id, claimed=opened.claimed, span=opened.span)
        await self.printer.drain()

    async def decide_pending(self) -> str | None:
        """Ask for a decision on every pending call; return the resume run the last one started."""
        resume: str | None = None
        pending = await self.db.approvals.list(thread_id=self.thread.thread_id, status="pending")
        for approval in pending:
            if approval.reviewers != "user":
                # Not this user's to decide: a reviewer with the role decides (`durable-chat review`).
                until = (
                    "" if approval.expires_at is None else f", until {approval.expires_at:%Y-%m-%d %H:%M} UTC"
                )
                self._say(
                    f"({call_text(approval.tool_name, approval.args)} waits for a reviewer "
                    f"with the role {approval.reviewers!r}{until})"
                )
                continue
            await self._show_context(approval)
            args: dict[str, object] | None = None
            while True:
                decision, reason, args = await self._ask(approval, args)
                try:
                    result = await decide(
                        self.db,
                        self.thread.thread_id,
                        approval.tool_call_id,
                        decision=decision,
                        decided_by=self.user_id,
                        override_args=args,
                        reason=reason,
                    )
                except InvalidArguments as error:  # an edit the tool's schema refuses: edit again
                    self.sink.say(f"(not accepted: {error})", "red")
                    continue
                except StoreError as error:  # decided meanwhile, e.g. in the browser
                    self._say(f"(cannot decide on {approval.tool_name}: {error})")
                    break
                resume = result.resume_run_id or resume
                break
        return resume

    async def _show_context(self, approval: Approval) -> None:
        if approval.path is not None and len(approval.path) > 1:
            self.sink.say(f"  (asked by {approval.agent}: {' > '.join(approval.path)})", "dim")
        review = ApprovalReview(
            thread_id=approval.thread_id,
            user_id=self.user_id,
            tool_call_id=approval.tool_call_id,
            tool_name=approval.tool_name,
            args=approval.args,
            engine=self.db.engine,
            metadata=approval.metadata,
        )
        context = await self.runtime.app.context_for(review)
        if context:
            self.sink.say("  " + " · ".join(f"{label}: {value}" for label, value in context.items()), "dim")
        if approval.metadata:
            self.sink.say("  " + fields_line(approval.metadata), "dim")

    async def _ask(
        self, approval: Approval, edited: dict[str, object] | None
    ) -> tuple[Literal["approved", "rejected"], str | None, dict[str, object] | None]:
        """The decision, the reason of a rejection and the edited arguments of an approval.

        `e` edits the arguments as JSON (invalid JSON is asked again, with the error); `edited`
        are the ones edited last, when the tool refused them.
        """
        args = approval.args if edited is None else edited
        question = f"Approve {call_text(approval.tool_name, args)}? [y/n/e] "
        if edited is not None:
            return "approved", None, await self._edit(edited)
        while True:
            answer = (await read_line(question)).strip().lower()
            if answer in {"y", "yes"}:
                return "approved", None, None
            if answer in {"n", "no"}:
                reason = (await read_line("Reason: ")).strip()
                return "rejected", reason or None, None
            if answer in {"e", "edit"}:
                return "approved", None, await self._edit(dict(args))
            if answer == QUIT:
                raise EndOfInput

    async def _edit(self, args: dict[str, object]) -> dict[str, object]:
        """Arguments as the user edits them: a JSON object on one line, asked again until it is one."""
        text = json.dumps(args, ensure_ascii=False)
        while True:
            answer = (await read_line("Arguments (JSON): ", prefill=text)).strip()
            if answer == QUIT:
                raise EndOfInput
            try:
                edited: object = json.loads(answer or text)
            except json.JSONDecodeError as error:
                self.sink.say(f"(not JSON: {error}; try again)", "red")
                text = answer
                continue
            if not isinstance(edited, dict):
                self.sink.say('(the arguments must be a JSON object, like {"amount": 5}; try again)', "red")
                text = answer
                continue
            items: list[tuple[object, object]] = list(edited.items())  # pyright: ignore[reportUnknownArgumentType]  # a JSON object
            return {str(key): value for key, value in items}

    def _say(self, text: str) -> None:
        self.sink.say(text)


class _CtrlC:
    """Ctrl-C in the chat: it stops the run being driven (a second one leaves), else it leaves the chat.

    The loop handles it (`loop.add_signal_handler`), not a Python signal handler as `asyncio.run`
    does: the kernel may hand SIGINT to any thread (to another while the main one starts a thread,
    under glibc), and Python then only flags it for the main thread, which a loop idle at the
    prompt never sees. The loop's handler is woken through its self-pipe from any thread. It is
    installed even when the chat started with SIGINT ignored (a script's background job), where
    `asyncio.run` installs none: the chat's controls need Ctrl-C, at the prompt as in a run.
    """

    def __init__(self, task: asyncio.Task[Any]) -> None:
        """Install the handler: Ctrl-C cancels `task` (the chat's), to leave."""
        self._loop = task.get_loop()
        self._task = task
        self.left = False
        """Whether Ctrl-C cancelled the chat's task."""
        self.installed = _on_sigint(self._loop, self._leave)
        """Whether the loop handles Ctrl-C (POSIX, main thread); elsewhere `asyncio.run` does,
        raising `KeyboardInterrupt`."""

    @contextlib.contextmanager
    def stopping(self, stop: Callable[[], None]) -> Generator[None]:
        """Within, the first Ctrl-C calls `stop` instead of leaving; the next one leaves."""
        if not self.installed or self.left:
            yield
            return

        def first() -> None:
            _on_sigint(self._loop, self._leave)
            stop()

        _on_sigint(self._loop, first)
        try:
            yield
        finally:
            if not self.left:
                _on_sigint(self._loop, self._leave)

    def close(self) -> None:
        """Leave Ctrl-C to Python's default again (`KeyboardInterrupt`)."""
        if self.installed and not self.left:
            self._loop.remove_signal_handler(signal.SIGINT)

    def _leave(self) -> None:
        self.left = True
        # A second Ctrl-C, while the chat closes, interrupts that too (`KeyboardInterrupt`).
        self._loop.remove_signal_handler(signal.SIGINT)
        self._task.cancel()


def _on_sigint(loop: asyncio.AbstractEventLoop, handler: Callable[[], None]) -> bool:
    """Have the loop call `handler` on Ctrl-C, instead of any handler before; whether that could be
    arranged (POSIX, main thread)."""
    try:
        loop.add_signal_handler(signal.SIGINT, handler)
    except (NotImplementedError, RuntimeError, ValueError):
        return False
    return True


async def chat(
    app: ChatApp[Any],
    database_url: str,
    *,
    options: RuntimeOptions | None = None,
    user_id: str | None = None,
    thread_id: str | None = None,
    out: TextIO | None = None,
) -> int:
    """Chat with `app` in the terminal until `/quit`, end of input or Ctrl-C; return the exit status
    (130, `INTERRUPTED`, after Ctrl-C).

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
    sink = TerminalSink(terminal, named=len(app.speakers) > 1)
    printer = _Printer(sink)
    task = asyncio.current_task()
    assert task is not None  # a coroutine run by a task, as asyncio runs every one
    ctrl_c = _CtrlC(task)
    try:
        async with open_runtime(app, database_url, options=options, publish=printer.publish) as runtime:
            db = runtime.db
            if thread_id is None:
                user_id = user_id or DEFAULT_USER
                thread = await db.threads.create(user_id=user_id)  # named after its first message
            else:
                thread = await db.threads.get(thread_id, user_id=user_id)
                user_id = thread.user_id
            session = _Chat(db, runtime, thread, user_id, printer, sink, terminal, ctrl_c)
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
    except asyncio.CancelledError:
        if not ctrl_c.left or task.uncancel() > 0:
            raise
        # Left with Ctrl-C: an interrupted run was put back in its queue; `--thread` continues it.
        sink.stop_spinner()
        terminal.write("\n")
        terminal.flush()
        return INTERRUPTED
    finally:
        ctrl_c.close()


async def _resume(session: _Chat) -> None:
    """Show the stored conversation, then finish what it left: an interrupted run, pending calls."""
    conversation = await session.db.conversations.load(session.thread.thread_id)
    named = session.sink.named
    lines = conversation_lines(conversation.messages, named=named) if conversation is not None else []
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
