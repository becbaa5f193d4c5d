"""How a call a reviewer decides shows in the AI SDK and AG-UI streams, and where roles come from."""

from __future__ import annotations

import json

import pytest

from stream import (
    ApprovalEscalated,
    ApprovalRequired,
    PendingCall,
    RunFinished,
    RunStarted,
    StreamEvent,
    ToolCall,
)
from web.auth import checked_roles
from web.errors import ApiError

from .test_ag_ui_events import frames as ag_ui_frames
from .test_ai_sdk_stream import frames as ai_sdk_frames

R = "run-1"
DEADLINE = "2026-11-27T16:00:00+00:00"


def paused() -> list[StreamEvent]:
    return [
        RunStarted(run_id=R, kind="message"),
        ToolCall(run_id=R, tool_call_id="c1", tool_name="issue_refund", args={"amount": 5}),
        ToolCall(run_id=R, tool_call_id="c2", tool_name="issue_refund", args={"amount": 500}),
        ApprovalRequired(
            run_id=R,
            approvals=[
                PendingCall(tool_call_id="c1", tool_name="issue_refund", args={"amount": 5}),
                PendingCall(
                    tool_call_id="c2",
                    tool_name="issue_refund",
                    args={"amount": 500},
                    reviewers="support",
                    expires_at=DEADLINE,
                ),
            ],
        ),
        RunFinished(run_id=R, status="awaiting_approval"),
    ]


def test_the_ai_sdk_gets_no_answerable_request_for_a_reviewers_call() -> None:
    chunks = [json.loads(line) for line in ai_sdk_frames(paused())[:-1]]
    requests = [c for c in chunks if c["type"] == "tool-approval-request"]
    waiting = [c for c in chunks if c["type"] == "data-awaiting-reviewer"]
    assert [r["toolCallId"] for r in requests] == ["c1"]
    assert [w["data"] for w in waiting] == [
        {"toolCallId": "c2", "reviewers": "support", "expiresAt": DEADLINE}
    ]


def test_the_ai_sdk_hears_of_an_escalation() -> None:
    events = [
        RunStarted(run_id=R, kind="message"),
        ApprovalEscalated(run_id=R, tool_call_id="c2", reviewers="managers", expires_at=None),
    ]
    chunks = [json.loads(line) for line in ai_sdk_frames(events)[:-1]]
    assert [c["data"] for c in chunks if c["type"] == "data-awaiting-reviewer"] == [
        {"toolCallId": "c2", "reviewers": "managers", "expiresAt": None}
    ]


def test_an_ag_ui_interrupt_carries_its_deadline() -> None:
    outcome = ag_ui_frames(paused())[-1]["outcome"]
    assert isinstance(outcome, dict)
    interrupts = outcome["interrupts"]  # pyright: ignore[reportUnknownVariableType]
    assert [i.get("expiresAt") for i in interrupts] == [None, DEADLINE]  # pyright: ignore[reportUnknownMemberType, reportUnknownVariableType]


def test_an_approval_required_event_names_reviewers_only_when_not_the_user() -> None:
    [event] = [e for e in paused() if isinstance(e, ApprovalRequired)]
    data = json.loads(event.model_dump_json())
    assert data["approvals"][0] == {"tool_call_id": "c1", "tool_name": "issue_refund", "args": {"amount": 5}}
    assert data["approvals"][1]["reviewers"] == "support"
    assert data["approvals"][1]["expires_at"] == DEADLINE


@pytest.mark.parametrize(
    ("claim", "roles"),
    [
        (None, frozenset()),
        (["support", "managers"], frozenset({"support", "managers"})),
        ("support managers", frozenset({"support", "managers"})),
        (["user", "support"], frozenset({"support"})),
        ([], frozenset()),
    ],
)
def test_roles_from_a_claim(claim: object, roles: frozenset[str]) -> None:
    assert checked_roles(claim, source="the token's 'roles' claim") == roles


@pytest.mark.parametrize("claim", [5, {"support": True}, [1], [""], ["a\x00b"], ["x" * 300]])
def test_a_malformed_roles_claim_is_an_invalid_token(claim: object) -> None:
    with pytest.raises(ApiError) as raised:
        checked_roles(claim, source="the token's 'roles' claim")
    assert (raised.value.status_code, raised.value.code) == (401, "invalid_token")
