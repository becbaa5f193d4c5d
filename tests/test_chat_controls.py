"""The terminal chat's controls in a real pseudo-terminal: Ctrl-C stops a run, `e` edits arguments, titles.

Same harness as `test_chat` (a `python -m cli chat` process on a pty, read without escape codes).
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

from store import Database

from .test_chat import Terminal, start, terminals, thread_id_of  # noqa: F401  (a fixture, used by name)

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="needs a POSIX pseudo-terminal")

SLOW = {"DURABLE_CHAT_DEMO_DELAY_SECONDS": "0.5"}


async def _thread(url: str, thread_id: str) -> tuple[str, list[str]]:
    """The thread's title and the statuses of its runs, oldest first."""
    async with await Database.connect(url) as db:
        thread = await db.threads.get(thread_id)
        async with db.engine.connect() as connection:
            from store.schema import RunRow, metadata

            runs = metadata.tables[RunRow.__tablename__]
            statuses = (
                await connection.execute(
                    runs.select()
                    .with_only_columns(runs.c.status)
                    .where(runs.c.thread_id == thread_id)
                    .order_by(runs.c.created_at)
                )
            ).scalars()
            return thread.title, list(statuses)


def test_ctrl_c_stops_the_run_the_chat_goes_on_and_a_second_one_leaves(
    tmp_path: Path,
    terminals: list[Terminal],  # noqa: F811
) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'c.db'}"
    chat = start(terminals, tmp_path, "chat", "--db", url, "--user", "alice", env=SLOW)
    thread_id = thread_id_of(chat.expect("you> "))
    chat.type("loop forever ORD-5678")
    chat.expect("→ lookup_order(order_id='ORD-5678')")
    assert "Thinking…" in chat.output  # the spinner while the model thinks
    assert "\x1b[" in chat.raw  # colours
    chat.interrupt()
    chat.expect("(stopped: the reply above may be incomplete)\n")
    chat.expect("you> ")
    title, statuses = asyncio.run(_thread(url, thread_id))
    # Named after its first message; the run ended cancelled, nothing left running.
    assert (title, statuses) == ("loop forever ORD-5678", ["cancelled"])

    chat.type("Where is my order ORD-9012?")
    chat.expect("assistant> Order ORD-9012")
    chat.expect("you> ")
    chat.type("loop forever ORD-3456")
    chat.expect("→ lookup_order(order_id='ORD-3456')")
    chat.interrupt()
    chat.expect("(stopped")
    chat.interrupt()
    assert chat.wait() == 130
    assert "Traceback" not in chat.output

    # The stop is in what is stored: continuing the thread shows it.
    again = start(terminals, tmp_path, "chat", "--db", url, "--thread", thread_id)
    shown = again.expect("(stopped)\n")
    # (What of the stopped run was stored before the stop depends on when it came.)
    assert "\nyou> loop forever ORD-5678\n" in shown
    again.expect("you> Where is my order ORD-9012?")
    again.expect("\nyou> ")
    again.end_input()
    assert again.wait() == 0


def test_edit_the_arguments_at_the_approval_prompt(tmp_path: Path, terminals: list[Terminal]) -> None:  # noqa: F811
    url = f"sqlite+aiosqlite:///{tmp_path / 'c.db'}"
    chat = start(terminals, tmp_path, "chat", "--db", url, "--user", "alice")
    chat.expect("you> ")
    chat.type("Please refund ORD-9012")
    # The app's facts for the reviewer come before the question.
    chat.expect("Refundable: $149.99")
    chat.expect("[y/n/e] ")
    chat.type("e")
    chat.expect("Arguments (JSON): ")
    chat.type("\x15{not json")  # Ctrl-U clears the line, which holds the arguments to edit
    chat.expect("(not JSON: ")
    chat.expect("Arguments (JSON): ")
    chat.type('\x15{"order_id": "ORD-9012", "amount": "fifty", "reason": "partial"}')
    chat.expect("(not accepted: ")
    chat.expect("Arguments (JSON): ")
    chat.type('\x15{"order_id": "ORD-9012", "amount": 5, "reason": "partial"}')
    chat.expect("← issue_refund: ")
    chat.expect("assistant> Refunded $5.00 for ORD-9012.")
    chat.expect("you> ")
    chat.type("/quit")
    assert chat.wait() == 0
    assert "Traceback" not in chat.output
