"""`durable-chat chat` in a real pseudo-terminal: streaming, y/n approvals, continuing a thread."""

from __future__ import annotations

import ctypes
import io
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from dirty_equals import IsStr

from cli.terminal import TerminalSink, conversation_lines
from stream import RunFinished, StreamEvent, TextDelta, TextDone, TextWithdrawn, ToolCall, ToolResult

from .test_cli import REPO_ROOT

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="needs a POSIX pseudo-terminal")

DEADLINE_SECONDS = 90
"""How long to wait for an expected output before failing: generous, not a speed assertion."""


class Terminal:
    """`python -m cli ARGS` attached to a pseudo-terminal, driven like a person at a keyboard."""

    def __init__(
        self,
        *args: str,
        cwd: Path,
        env: dict[str, str] | None = None,
        columns: int = 300,
        sigint_ignored: bool = False,
    ) -> None:
        """`sigint_ignored` starts it with SIGINT ignored, as a non-interactive shell starts a
        background job (`command &`): a process keeps that across `exec`."""
        environment = {
            name: value for name, value in os.environ.items() if not name.startswith("DURABLE_CHAT_")
        }
        environment["PYTHONPATH"] = os.pathsep.join(
            filter(None, [str(REPO_ROOT), environment.get("PYTHONPATH")])
        )
        environment["PYTHONUNBUFFERED"] = "1"
        environment.update(TERM="xterm-256color", COLUMNS=str(columns), LINES="50", **(env or {}))
        self._master, slave = os.openpty()
        try:
            command = [sys.executable, "-m", "cli", *args]
            if sigint_ignored:
                command = ["/bin/sh", "-c", 'trap "" INT; exec "$@"', "sh", *command]
            self._process = subprocess.Popen(
                command,
                cwd=cwd,
                stdin=slave,
                stdout=slave,
                stderr=slave,
                start_new_session=True,
                env=environment,
            )
        finally:
            os.close(slave)
        self.raw = ""
        """Every byte the program wrote, colours and cursor moves included."""
        self.output = ""
        """The text the terminal showed so far: no escape codes, a bare `\\r` (a line written
        again) as a new line, no spaces at the ends of lines."""
        self._seen = 0

    def expect(self, text: str) -> str:
        """Wait until `text` appears after what was expected before; return the output up to its end."""
        deadline = time.monotonic() + DEADLINE_SECONDS
        while (found := self.output.find(text, self._seen)) < 0:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not self._read(remaining):
                raise AssertionError(
                    f"{text!r} did not appear; the terminal showed:\n{self.output}\n{self._state()}"
                )
        self._seen = found + len(text)
        return self.output[: self._seen]

    def type(self, line: str) -> None:
        os.write(self._master, line.encode() + b"\n")

    def end_input(self) -> None:
        """Ctrl-D at the start of a line: end of input."""
        os.write(self._master, b"\x04")

    def interrupt(self) -> None:
        """Ctrl-C."""
        self._process.send_signal(signal.SIGINT)

    def interrupt_another_thread(self) -> None:
        """Ctrl-C as the kernel may hand it to a process, to a thread other than the main one (see
        `cli.chat._CtrlC`): here every time."""
        pid = self._process.pid
        others = sorted(int(tid) for tid in os.listdir(f"/proc/{pid}/task") if int(tid) != pid)
        assert others, "the chat runs no thread besides its main one"
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.tgkill(pid, others[0], signal.SIGINT) != 0:
            raise OSError(ctypes.get_errno(), f"tgkill({pid}, {others[0]}, SIGINT) failed")

    def wait(self) -> int:
        """Drain the output until the process exits; return its exit status."""
        deadline = time.monotonic() + DEADLINE_SECONDS
        while self._read(max(0.0, deadline - time.monotonic())):
            pass
        try:
            return self._process.wait(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            raise AssertionError(
                f"the process did not exit; the terminal showed:\n{self.output}\n{self._state()}"
            ) from None

    def close(self) -> None:
        if self._process.poll() is None:
            self._process.kill()
            self._process.wait()
        os.close(self._master)

    def _state(self) -> str:
        """What the process is doing, when it does not do what was expected (see `process_state`)."""
        if self._process.poll() is not None:
            return f"(it exited with status {self._process.returncode})"
        return process_state(self._process.pid)

    def _read(self, timeout: float) -> bool:
        """Read what is there within `timeout`; False at the end of the output (or time)."""
        ready, _, _ = select.select([self._master], [], [], timeout)
        if not ready:
            return False
        try:
            chunk = os.read(self._master, 4096)
        except OSError:  # EIO: the process exited and closed the terminal
            return False
        if not chunk:
            return False
        self.raw += chunk.decode(errors="replace")
        self.output = _visible(self.raw)
        return True


def process_state(pid: int) -> str:
    """A stuck process's signal masks, per thread and its own (/proc), and its threads' Python stacks
    (`py-spy dump`, when py-spy is installed: the `bench` extra)."""
    lines = [f"process {pid}:"]
    try:
        for tid in sorted(os.listdir(f"/proc/{pid}/task"), key=int):
            fields = _status_fields(Path(f"/proc/{pid}/task/{tid}/status"))
            wchan = Path(f"/proc/{pid}/task/{tid}/wchan").read_text()
            shown = " ".join(f"{name} {fields.get(name, '?')}" for name in ("State", "SigPnd", "SigBlk"))
            lines.append(f"  thread {tid}: {shown} wchan {wchan or '-'}")
        fields = _status_fields(Path(f"/proc/{pid}/status"))
        lines.append("  " + " ".join(f"{name} {fields.get(name, '?')}" for name in _PROCESS_SIGNALS))
    except OSError as error:  # not Linux, or it exited meanwhile
        lines.append(f"  (no /proc: {error})")
    py_spy = shutil.which("py-spy", path=str(Path(sys.executable).parent)) or shutil.which("py-spy")
    if py_spy is None:
        lines.append("(no py-spy for the Python stacks: pip install -e '.[bench]')")
        return "\n".join(lines)
    try:
        dump = subprocess.run(
            [py_spy, "dump", "--pid", str(pid)], capture_output=True, text=True, timeout=DEADLINE_SECONDS
        )
    except subprocess.TimeoutExpired:
        lines.append("(py-spy dump did not answer)")
    else:
        lines.append(dump.stdout + dump.stderr)
    return "\n".join(lines)


_PROCESS_SIGNALS = ("SigPnd", "ShdPnd", "SigBlk", "SigIgn", "SigCgt")


def _status_fields(path: Path) -> dict[str, str]:
    return {
        name: value.strip()
        for name, _, value in (line.partition(":") for line in path.read_text().splitlines())
    }


_ESCAPES = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def _visible(raw: str) -> str:
    text = _ESCAPES.sub("", raw).replace("\r\n", "\n").replace("\r", "\n")
    return re.sub(r"[ \t]+\n", "\n", text)


@pytest.fixture
def terminals(tmp_path: Path) -> Iterator[list[Terminal]]:
    opened: list[Terminal] = []
    yield opened
    for terminal in opened:
        terminal.close()


def start(
    terminals: list[Terminal],
    cwd: Path,
    *args: str,
    env: dict[str, str] | None = None,
    columns: int = 300,
    sigint_ignored: bool = False,
) -> Terminal:
    terminal = Terminal(*args, cwd=cwd, env=env, columns=columns, sigint_ignored=sigint_ignored)
    terminals.append(terminal)
    return terminal


def thread_id_of(output: str) -> str:
    match = re.search(r"--thread (\S+);", output)
    assert match is not None, output
    return match.group(1)


def test_refund_approved_in_the_terminal_then_the_thread_continues(
    tmp_path: Path, terminals: list[Terminal]
) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'c.db'}"
    first = start(terminals, tmp_path, "chat", "--db", url, "--user", "alice")
    thread_id = thread_id_of(first.expect("you> "))
    first.type("Please refund ORD-5678")
    first.expect("→ lookup_order(order_id='ORD-5678')")
    first.expect("← lookup_order: ")
    first.expect(
        "Approve issue_refund(order_id='ORD-5678', amount=99.98, reason='Please refund ORD-5678')? [y/n/e] "
    )
    first.type("y")
    first.expect("← issue_refund: ")
    first.expect("assistant> Refunded $99.98 for ORD-5678.\n")
    first.expect("you> ")
    first.type("/quit")
    assert first.wait() == 0
    assert "Traceback" not in first.output

    second = start(terminals, tmp_path, "chat", "--db", url, "--thread", thread_id)
    shown = second.expect("assistant> Refunded $99.98 for ORD-5678.\n")
    header, *history = shown.splitlines()
    assert f"thread {thread_id} (user 'alice')" in header
    assert history == [
        "you> Please refund ORD-5678",
        "→ lookup_order(order_id='ORD-5678')",
        IsStr(regex=r'← lookup_order: \{"order_id": "ORD-5678", .*'),
        "→ issue_refund(order_id='ORD-5678', amount=99.98, reason='Please refund ORD-5678')",
        IsStr(regex=r'← issue_refund: \{"order_id": "ORD-5678", "refunded": 99.98, .*'),
        "assistant> Refunded $99.98 for ORD-5678.",
    ]
    # Nothing waits for a decision: the next thing is the prompt.
    assert second.expect("you> ").endswith("ORD-5678.\nyou> ")
    second.end_input()
    assert second.wait() == 0


def test_a_chat_left_at_the_question_asks_again_and_a_rejection_quotes_the_reason(
    tmp_path: Path, terminals: list[Terminal]
) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'c.db'}"
    first = start(terminals, tmp_path, "chat", "--db", url, "--user", "alice")
    thread_id = thread_id_of(first.expect("you> "))
    first.type("Please refund ORD-5678")
    first.expect("Approve issue_refund(")
    first.end_input()  # leave without deciding: the thread waits in the database
    assert first.wait() == 0

    second = start(terminals, tmp_path, "chat", "--db", url, "--thread", thread_id, "--user", "alice")
    second.expect("you> Please refund ORD-5678\n")
    second.expect(
        "Approve issue_refund(order_id='ORD-5678', amount=99.98, reason='Please refund ORD-5678')? [y/n/e] "
    )
    second.type("maybe")  # neither y nor n: asked again
    second.expect("[y/n/e] ")
    second.type("n")
    second.expect("Reason: ")
    second.type("over the limit")
    second.expect("← issue_refund denied: ")
    second.expect('was rejected: "The reviewer rejected this call: over the limit".\n')
    second.expect("you> ")
    second.type("/quit")
    assert second.wait() == 0
    assert "Traceback" not in first.output + second.output


def test_another_users_thread_is_not_found(tmp_path: Path, terminals: list[Terminal]) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'c.db'}"
    first = start(terminals, tmp_path, "chat", "--db", url, "--user", "alice")
    thread_id = thread_id_of(first.expect("you> "))
    first.end_input()
    assert first.wait() == 0

    second = start(terminals, tmp_path, "chat", "--db", url, "--thread", thread_id, "--user", "mallory")
    assert second.wait() == 1
    assert second.output.startswith("durable-chat: error: ")
    assert "Traceback" not in second.output


def test_ctrl_c_at_the_prompt_ends_the_chat(tmp_path: Path, terminals: list[Terminal]) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'c.db'}"
    chat = start(terminals, tmp_path, "chat", "--db", url)
    chat.expect("(user 'demo')")
    chat.expect("you> ")
    chat.interrupt()
    # The thread blocked in `input()` does not keep the process alive.
    assert chat.wait() == 130
    assert "Traceback" not in chat.output


def test_ctrl_c_ends_a_chat_started_with_sigint_ignored(tmp_path: Path, terminals: list[Terminal]) -> None:
    # Started so (by a script, in the background), Python installs no Ctrl-C handler, nor does
    # `asyncio.run`: the chat's own controls (stop the run, leave) need one all the same.
    url = f"sqlite+aiosqlite:///{tmp_path / 'c.db'}"
    chat = start(terminals, tmp_path, "chat", "--db", url, sigint_ignored=True)
    chat.expect("you> ")
    chat.interrupt()
    assert chat.wait() == 130
    assert "Traceback" not in chat.output


@pytest.mark.skipif(
    sys.platform != "linux" or not hasattr(ctypes.CDLL(None), "tgkill"),
    reason="sends a signal to one thread of another process: Linux",
)
@pytest.mark.parametrize("after_a_reply", [False, True], ids=["first prompt", "after a reply"])
def test_ctrl_c_that_reaches_another_thread_ends_the_chat(
    tmp_path: Path, terminals: list[Terminal], after_a_reply: bool
) -> None:
    # Python's own signal handler would only flag it for the main thread, idle in the event loop.
    url = f"sqlite+aiosqlite:///{tmp_path / 'c.db'}"
    chat = start(terminals, tmp_path, "chat", "--db", url)
    chat.expect("you> ")
    if after_a_reply:  # a run sets Ctrl-C to stop it, then back to leaving
        chat.type("Where is my order ORD-9012?")
        chat.expect("assistant> Order ORD-9012")
        chat.expect("you> ")
    chat.interrupt_another_thread()
    assert chat.wait() == 130
    assert "Traceback" not in chat.output


# -- the sink and the history, without a terminal --------------------------------------------------


async def emit_all(sink: TerminalSink, *events: StreamEvent) -> None:
    for event in events:
        await sink.emit(event)
    await sink.flush()


@pytest.mark.anyio
async def test_terminal_sink_prints_text_as_it_streams_and_tools_on_one_line() -> None:
    out = io.StringIO()
    sink = TerminalSink(out)
    await sink.emit(
        ToolCall(run_id="r", tool_call_id="c", tool_name="lookup_order", args={"order_id": "ORD-1"})
    )
    await sink.emit(TextDelta(run_id="r", part_id="p0", delta="Hello"))
    assert out.getvalue().endswith("assistant> Hello")  # no newline until the part is done
    await emit_all(
        sink,
        TextDelta(run_id="r", part_id="p0", delta=" there"),
        TextDone(run_id="r", part_id="p0", text="Hello there"),
        ToolResult(
            run_id="r",
            tool_call_id="c",
            tool_name="lookup_order",
            outcome="success",
            content={"x": "y" * 200},
        ),
        ToolResult(run_id="r", tool_call_id="d", tool_name="issue_refund", outcome="denied", content="no"),
        TextDelta(run_id="r", part_id="p1", delta="api_secret=…"),
        TextWithdrawn(run_id="r", part_id="p1", replacement="Sorry, I can't share that."),
        RunFinished(run_id="r", status="failed", error="the model is unavailable"),
    )
    lines = out.getvalue().splitlines()
    assert lines[:3] == [
        "→ lookup_order(order_id='ORD-1')",
        "assistant> Hello there",
        '← lookup_order: {"x": "' + "y" * 92 + "…",
    ]
    assert lines[3:] == [
        "← issue_refund denied: no",
        "assistant> api_secret=…",
        "(the reply above was withdrawn)",
        "assistant> Sorry, I can't share that.",
        "(the run failed: the model is unavailable)",
    ]


def test_conversation_lines_of_an_empty_conversation() -> None:
    assert conversation_lines([]) == []


def test_a_calls_metadata_is_shown_before_the_question_and_structured_output_as_a_table(
    tmp_path: Path, terminals: list[Terminal]
) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'c.db'}"
    chat = start(terminals, tmp_path, "chat", "--db", url, "--app", "tests.outputs_app:app")
    chat.expect("you> ")
    chat.type("Flights to Atlantis?")
    # The first output was refused (not on the timetable) and asked again: its call is closed with why.
    chat.expect("← final_result_FlightFound failed: ")
    chat.expect("assistant> No flight found (no details)\n")
    chat.expect("you> ")
    chat.type("Book TP-101")
    shown = chat.expect("[y/n/e] ")
    assert shown.splitlines()[-2:] == [
        "  fare: non-refundable · checked_bags: 1 · price: 420.0",
        "Approve book(flight_number='TP-101', passenger='Ada Lovelace')? [y/n/e] ",
    ]
    chat.type("y")
    table = chat.expect("passenger      Ada Lovelace\n")
    assert table.splitlines()[-4:] == [
        "assistant> Booked",
        "           reference      BK-TP-101",
        "           flight_number  TP-101",
        "           passenger      Ada Lovelace",
    ]
    chat.expect("you> ")
    chat.type("/quit")
    assert chat.wait() == 0
    assert "Traceback" not in chat.output


def test_a_file_attached_with_slash_attach_goes_with_the_next_message(
    tmp_path: Path, terminals: list[Terminal]
) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'c.db'}"
    (tmp_path / "orders.csv").write_bytes(b"order,amount\nORD-5678,99.98\n")
    (tmp_path / "page.html").write_bytes(b"<!DOCTYPE html><html></html>")
    first = start(terminals, tmp_path, "chat", "--db", url, "--user", "alice")
    thread_id = thread_id_of(first.expect("you> "))
    first.type("/attach page.html")
    first.expect("(cannot attach: files of type text/html are not accepted)")
    first.expect("you> ")
    first.type("/attach missing.csv")
    first.expect("(cannot attach: cannot read 'missing.csv'")
    first.expect("you> ")
    first.type("/attach orders.csv")
    first.expect(
        "(attached orders.csv, text/csv, 28 bytes: it goes with your next message; Enter alone sends it now)"
    )
    first.expect("you> ")
    first.type("Where is my order ORD-5678?")
    first.expect("assistant> ")
    first.expect("you> ")
    first.type("")  # nothing attached: an empty line sends nothing
    first.expect("you> ")
    first.type("/attach orders.csv")
    first.expect("Enter alone sends it now)")
    first.expect("you> ")
    first.type("")  # the file alone is the message
    first.expect("assistant> ")
    first.expect("you> ")
    first.type("/quit")
    assert first.wait() == 0
    assert "Traceback" not in first.output

    second = start(terminals, tmp_path, "chat", "--db", url, "--thread", thread_id)
    shown = second.expect("you> Where is my order ORD-5678?\n  (attached orders.csv, text/csv, 28 bytes)\n")
    assert "Traceback" not in shown
    second.end_input()
    assert second.wait() == 0
