"""Several agents in the terminal: replies prefixed with their agent's name, a delegated agent's steps
indented under the call that delegated, a nested approval's question naming the chain."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from inline_snapshot import snapshot
from pydantic_ai.messages import ModelRequest, ModelResponse, TextPart, ToolCallPart, UserPromptPart

from cli.terminal import TerminalSink, conversation_lines
from stream import AgentChanged, TextDelta, TextDone, ToolCall, ToolResult

from .test_chat import Terminal, start, terminals, thread_id_of  # noqa: F401  (the fixture)


@pytest.mark.anyio
async def test_delegated_steps_are_indented_and_replies_name_their_agent() -> None:
    out = io.StringIO()
    sink = TerminalSink(out, terminal=False)
    tags = {"run_id": "r"}
    for event in [
        TextDone(**tags, agent="router", part_id="p0", text="Over to billing."),
        AgentChanged(**tags, agent="billing", previous="router"),
        ToolCall(**tags, agent="billing", tool_call_id="b1", tool_name="ask_booking", args={"task": "go"}),
        ToolCall(
            **tags,
            agent="booking",
            parent_tool_call_id="b1",
            tool_call_id="k1",
            tool_name="ask_payments",
            args={},
        ),
        ToolCall(
            **tags,
            agent="payments",
            parent_tool_call_id="k1",
            tool_call_id="p1",
            tool_name="charge",
            args={"cents": 3},
        ),
        ToolResult(
            **tags,
            agent="payments",
            parent_tool_call_id="k1",
            tool_call_id="p1",
            tool_name="charge",
            outcome="success",
            content="charged 3",
        ),
        TextDelta(**tags, agent="payments", parent_tool_call_id="k1", part_id="k1.1.0", delta="paid"),
        TextDone(
            **tags, agent="payments", parent_tool_call_id="k1", part_id="k1.1.0", text="paid,\nall of it"
        ),
        ToolResult(
            **tags,
            agent="booking",
            parent_tool_call_id="b1",
            tool_call_id="k1",
            tool_name="ask_payments",
            outcome="success",
            content="paid",
        ),
        TextDone(**tags, agent="booking", parent_tool_call_id="b1", part_id="b1.1.0", text="booked"),
        ToolResult(
            **tags,
            agent="billing",
            tool_call_id="b1",
            tool_name="ask_booking",
            outcome="success",
            content="booked",
        ),
        TextDelta(**tags, agent="billing", part_id="p1", delta="All "),
        TextDelta(**tags, agent="billing", part_id="p1", delta="done."),
        TextDone(**tags, agent="billing", part_id="p1", text="All done."),
        TextDone(**tags, part_id="p2", text="An app's only agent is not named."),
    ]:
        await sink.emit(event)
    assert out.getvalue().splitlines() == snapshot(
        [
            "router> Over to billing.",
            "(the billing agent answers from now on)",
            "→ ask_booking(task='go')",
            "    → ask_payments()",
            "        → charge(cents=3)",
            "        ← charge: charged 3",
            "        payments> paid,",
            "            all of it",
            "    ← ask_payments: paid",
            "    booking> booked",
            "← ask_booking: booked",
            "billing> All done.",
            "assistant> An app's only agent is not named.",
        ]
    )


def test_a_stored_reply_names_its_agent() -> None:
    said = {"durable_chat_agent": "billing"}
    messages = [
        ModelRequest(parts=[UserPromptPart("Pay")]),
        ModelResponse(parts=[ToolCallPart("ask_booking", {"task": "go"}, "b1")], provider_details=said),
        ModelResponse(parts=[TextPart("Paid.")], provider_details=said),
        ModelResponse(parts=[TextPart("Hello.")]),
    ]
    assert conversation_lines(messages) == [
        "you> Pay",
        "→ ask_booking(task='go')",
        "billing> Paid.",
        "assistant> Hello.",
    ]


def _lines(output: str) -> list[str]:
    """The lines printed, without blank ones and the spinner's (its frames are braille characters)."""
    return [line for line in output.splitlines() if line.strip() and not "\u2800" <= line[0] <= "\u28ff"]


def test_a_nested_approval_in_the_terminal(tmp_path: Path, terminals: list[Terminal]) -> None:  # noqa: F811
    effects = tmp_path / "effects.txt"
    url = f"sqlite+aiosqlite:///{tmp_path / 'c.db'}"
    args = ("chat", "--db", url, "--user", "alice", "--app", "tests.agent_chains:desk_app")
    chat = start(terminals, tmp_path, *args, env={"AGENT_CHAIN_EFFECTS": str(effects)})
    thread_id = thread_id_of(chat.expect("you> "))
    chat.type("Hello")
    chat.expect("(the billing agent answers from now on)")
    chat.expect("router> Billing will help you.")
    chat.expect("you> ")
    chat.type("Pay the deposit")
    shown = chat.expect("[y/n/e] ")
    assert _lines(shown)[-5:] == [
        "→ ask_booking(task='deposit')",
        "    → ask_payments(task='charge')",
        "        → charge(cents=300)",
        "  (asked by payments: billing > booking > payments)",
        "Approve charge(cents=300)? [y/n/e] ",
    ]
    chat.type("y")
    done = chat.expect("billing> Your deposit is paid.")
    assert _lines(done)[-6:] == [
        "        ← charge: charged 300",
        "        payments> payments charged",
        "    ← ask_payments: payments charged",
        "    booking> booking done",
        "← ask_booking: booking done",
        "billing> Your deposit is paid.",
    ]
    chat.expect("you> ")
    chat.type("/quit")
    assert chat.wait() == 0
    assert "Traceback" not in chat.output
    assert effects.read_text() == "charged 300\n"

    again = start(
        terminals, tmp_path, *args, "--thread", thread_id, env={"AGENT_CHAIN_EFFECTS": str(effects)}
    )
    history = again.expect("billing> Your deposit is paid.\n").splitlines()[1:]
    assert history == [
        "you> Hello",
        "→ transfer_to_billing()",
        "← transfer_to_billing: The conversation is now with billing; it answers the user's next message.",
        "router> Billing will help you.",
        "you> Pay the deposit",
        "→ ask_booking(task='deposit')",
        "← ask_booking: booking done",
        "billing> Your deposit is paid.",
    ]
    again.end_input()
    assert again.wait() == 0
