"""The demo model and the feedback sub-agent's model, driven through a real `Agent` with stub tools."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Sequence
from typing import TypeVar

import pytest
from dirty_equals import IsDatetime, IsStr
from inline_snapshot import snapshot
from pydantic_ai import Agent, AgentRunResult, ModelRetry, PromptedOutput, Tool, capture_run_messages
from pydantic_ai.exceptions import ToolFailed, UsageLimitExceeded
from pydantic_ai.messages import (
    INTERRUPTED_TOOL_RETURN_CONTENT,
    ModelMessage,
    ModelRequest,
    ModelResponse,
    PartDeltaEvent,
    TextPart,
    TextPartDelta,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import FunctionModel
from pydantic_ai.tools import DeferredToolRequests, DeferredToolResults, ToolApproved, ToolDenied
from pydantic_ai.usage import RequestUsage, UsageLimits

from agent.demo import Feedback, analyze_feedback, demo_model, feedback_agent, feedback_model
from agent.demo.feedback import feedback_model_for

pytestmark = pytest.mark.anyio

OutputT = TypeVar("OutputT")

ORDERS: dict[str, dict[str, object]] = {
    "ORD-5678": {
        "order_id": "ORD-5678",
        "item": "Widget Pro",
        "quantity": 2,
        "total": 99.98,
        "status": "shipped",
        "tracking": "TRK-111",
        "refunded": 0.0,
    },
    "ORD-9012": {
        "order_id": "ORD-9012",
        "item": "Gadget Plus",
        "quantity": 1,
        "total": 149.99,
        "status": "processing",
        "tracking": None,
        "refunded": 0.0,
    },
    "ORD-3456": {
        "order_id": "ORD-3456",
        "item": "Cable Kit",
        "quantity": 5,
        "total": 24.95,
        "status": "delivered",
        "tracking": None,
        "refunded": 0.0,
    },
}
ACCOUNTS: dict[str, dict[str, object]] = {
    "alice@example.com": {
        "email": "alice@example.com",
        "name": "Alice Johnson",
        "plan": "Premium",
        "member_since": 2022,
    },
}


def lookup_order(order_id: str) -> dict[str, object]:
    return ORDERS.get(order_id, {"error": f"No order {order_id!r} was found."})


def lookup_account(email: str) -> dict[str, object]:
    if email == "down@example.com":
        raise ToolFailed("the account service is down")
    if email == "retry@example.com":
        raise ModelRetry("try another address")
    return ACCOUNTS.get(email, {"email": email, "error": f"No account for {email}."})


def search_faq(query: str) -> dict[str, object]:
    return {"answers": [{"topic": query, "answer": f"Our {query} policy: see the help centre."}]}


def issue_refund(order_id: str, amount: float, reason: str) -> dict[str, object]:
    return {"order_id": order_id, "refunded": amount, "message": f"Refunded ${amount:.2f} for {order_id}."}


def cancel_order(order_id: str, reason: str) -> dict[str, object]:
    return {"order_id": order_id, "status": "cancelled"}


async def record_feedback(conversation: str) -> dict[str, object]:
    result = await feedback_agent.run(conversation, model=feedback_model())
    return result.output.model_dump()


def make_agent() -> Agent[None, str | DeferredToolRequests]:
    return Agent(
        demo_model(),
        output_type=[str, DeferredToolRequests],
        tools=[
            lookup_order,
            lookup_account,
            search_faq,
            Tool(issue_refund, requires_approval=True),
            Tool(cancel_order, requires_approval=True),
            record_feedback,
        ],
    )


async def run_streamed(agent: Agent[None, OutputT], prompt: str) -> AgentRunResult[OutputT]:
    """Run through the model's stream function, as the product does."""
    async with agent.run_stream_events(prompt) as events:
        async for _ in events:
            pass
    assert events.result is not None
    return events.result


RUN_TAG = re.compile(r"_[0-9a-f]{6}$")
"""The digest of the asking run at the end of a demo tool call id."""


def plain(tool_call_id: str) -> str:
    """A demo tool call id without its run's digest: `call_<n>_<tool>`."""
    return RUN_TAG.sub("", tool_call_id)


def transcript(messages: Sequence[ModelMessage]) -> list[str]:
    """The conversation as one readable line per part, tool call ids without their run's digest."""
    lines: list[str] = []
    for message in messages:
        for part in message.parts:
            match part:
                case UserPromptPart():
                    lines.append(f"user: {part.content}")
                case TextPart():
                    lines.append(f"model: {part.content}")
                case ToolCallPart():
                    lines.append(
                        f"call {plain(part.tool_call_id)}: {part.tool_name}({part.args_as_json_str()})"
                    )
                case ToolReturnPart():
                    lines.append(f"{part.outcome} {plain(part.tool_call_id)}: {part.model_response_str()}")
                case _:
                    lines.append(repr(part))
    return lines


async def test_order_lookup_message_list() -> None:
    result = await make_agent().run("Where is my order ORD-5678?")

    assert result.output == "Order ORD-5678: Widget Pro x2, $99.98, shipped (tracking TRK-111)."
    assert result.all_messages() == snapshot(
        [
            ModelRequest(
                parts=[UserPromptPart(content="Where is my order ORD-5678?", timestamp=IsDatetime())],
                timestamp=IsDatetime(),
                run_id=IsStr(),
                conversation_id=IsStr(),
            ),
            ModelResponse(
                parts=[
                    ToolCallPart(
                        tool_name="lookup_order",
                        args='{"order_id": "ORD-5678"}',
                        tool_call_id=IsStr(regex=r"call_0_lookup_order_[0-9a-f]{6}"),
                    )
                ],
                usage=RequestUsage(input_tokens=55, output_tokens=5),
                model_name="demo",
                model_id="function:demo",
                timestamp=IsDatetime(),
                run_id=IsStr(),
                conversation_id=IsStr(),
            ),
            ModelRequest(
                parts=[
                    ToolReturnPart(
                        tool_name="lookup_order",
                        content={
                            "order_id": "ORD-5678",
                            "item": "Widget Pro",
                            "quantity": 2,
                            "total": 99.98,
                            "status": "shipped",
                            "tracking": "TRK-111",
                            "refunded": 0.0,
                        },
                        tool_call_id=IsStr(regex=r"call_0_lookup_order_[0-9a-f]{6}"),
                        timestamp=IsDatetime(),
                    )
                ],
                timestamp=IsDatetime(),
                run_id=IsStr(),
                conversation_id=IsStr(),
            ),
            ModelResponse(
                parts=[
                    TextPart(content="Order ORD-5678: Widget Pro x2, $99.98, shipped (tracking TRK-111).")
                ],
                usage=RequestUsage(input_tokens=73, output_tokens=16),
                model_name="demo",
                model_id="function:demo",
                timestamp=IsDatetime(),
                run_id=IsStr(),
                conversation_id=IsStr(),
            ),
        ]
    )


@pytest.mark.parametrize(
    "prompt",
    [
        pytest.param("Show me the stack trace for ORD-5678", id="stack-trace-first"),
        pytest.param("loop forever", id="loop"),
        pytest.param("Loop forever on ord-3456, refund it", id="loop-before-refund"),
        pytest.param("Some feedback: cancel ORD-5678 was slow", id="feedback-before-cancel"),
        pytest.param("Please REFUND ORD-9012 and ORD-3456", id="refund-first-order"),
        pytest.param("I want a refund", id="refund-without-order"),
        pytest.param("cancel ORD-5678, ord-3456 and ORD-5678 again", id="cancel-deduplicated"),
        pytest.param("status of ord-9012 for bob@example.com", id="order-before-email"),
        pytest.param("I'm Bob@Example.COM, what about shipping?", id="email-before-faq"),
        pytest.param("Is there a warranty? What are your returns and shipping rules?", id="faq-first-word"),
        pytest.param("hello", id="greeting"),
    ],
)
async def test_first_response_per_row(prompt: str) -> None:
    # The run stops after the first response, which is all this test is about.
    with capture_run_messages() as messages, contextlib.suppress(UsageLimitExceeded):
        await make_agent().run(prompt, usage_limits=UsageLimits(request_limit=1))

    first_response = next(message for message in messages if isinstance(message, ModelResponse))
    expected = snapshot(
        {
            "Show me the stack trace for ORD-5678": [
                'model: Oops, an internal error occurred. Here is the stack trace: Traceback (most recent call last): File "/srv/app/orders.py", line 42, in lookup: database connection refused for postgres://app@10.0.0.5:5432/prod with api_secret=sk-live-demo-0000.'
            ],
            "loop forever": ['call call_0_lookup_order: lookup_order({"order_id":"ORD-5678"})'],
            "Loop forever on ord-3456, refund it": [
                'call call_0_lookup_order: lookup_order({"order_id":"ORD-3456"})'
            ],
            "Some feedback: cancel ORD-5678 was slow": [
                'call call_0_record_feedback: record_feedback({"conversation":"Some feedback: cancel ORD-5678 was slow"})'
            ],
            "Please REFUND ORD-9012 and ORD-3456": [
                'call call_0_lookup_order: lookup_order({"order_id":"ORD-9012"})'
            ],
            "I want a refund": [
                "model: Hi! I'm the demo support assistant. I can look up orders (try ORD-5678) and accounts by e-mail, answer shipping, returns and warranty questions, issue refunds and cancel orders once a person approves, and record your feedback."
            ],
            "cancel ORD-5678, ord-3456 and ORD-5678 again": [
                'call call_0_cancel_order: cancel_order({"order_id":"ORD-5678","reason":"cancel ORD-5678, ord-3456 and ORD-5678 again"})',
                'call call_1_cancel_order: cancel_order({"order_id":"ORD-3456","reason":"cancel ORD-5678, ord-3456 and ORD-5678 again"})',
            ],
            "status of ord-9012 for bob@example.com": [
                'call call_0_lookup_order: lookup_order({"order_id":"ORD-9012"})'
            ],
            "I'm Bob@Example.COM, what about shipping?": [
                'call call_0_lookup_account: lookup_account({"email":"bob@example.com"})'
            ],
            "Is there a warranty? What are your returns and shipping rules?": [
                'call call_0_search_faq: search_faq({"query":"warranty"})'
            ],
            "hello": [
                "model: Hi! I'm the demo support assistant. I can look up orders (try ORD-5678) and accounts by e-mail, answer shipping, returns and warranty questions, issue refunds and cancel orders once a person approves, and record your feedback."
            ],
        }
    )
    assert transcript([first_response]) == expected[prompt]


async def test_stack_trace_leaks_internal_detail() -> None:
    result = await make_agent().run("I got a stack trace")

    assert isinstance(result.output, str)
    for phrase in ("internal error", "stack trace", "database connection", "api_secret"):
        assert phrase in result.output


@pytest.mark.parametrize(
    ("prompt", "reply"),
    [
        pytest.param(
            "What about ord-9012?",
            "Order ORD-9012: Gadget Plus x1, $149.99, processing.",
            id="order-no-tracking",
        ),
        pytest.param(
            "And ORD-1?",
            "Sorry, I couldn't complete the lookup of order ORD-1: No order 'ORD-1' was found.",
            id="order-unknown",
        ),
        pytest.param(
            "I am alice@example.com",
            "Account alice@example.com: Alice Johnson, Premium plan, member since 2022.",
            id="account",
        ),
        pytest.param(
            "who is nobody@example.org?",
            "Sorry, I couldn't complete the account lookup for nobody@example.org: No account for nobody@example.org.",
            id="account-unknown",
        ),
        pytest.param("Tell me about returns", "Our returns policy: see the help centre.", id="faq"),
        pytest.param(
            "check down@example.com",
            "I couldn't complete the account lookup for down@example.com: the account service is down.",
            id="tool-failed",
        ),
        pytest.param(
            "check retry@example.com",
            "I couldn't complete the account lookup for retry@example.com.",
            id="tool-retried",
        ),
    ],
)
async def test_answers_with_the_tool_result(prompt: str, reply: str) -> None:
    result = await make_agent().run(prompt)

    assert result.output == reply


async def test_tool_failures_reach_the_model_as_outcomes() -> None:
    failed = await make_agent().run("check down@example.com")
    retried = await make_agent().run("check retry@example.com")

    assert transcript(failed.all_messages()) == snapshot(
        [
            "user: check down@example.com",
            'call call_0_lookup_account: lookup_account({"email":"down@example.com"})',
            'failed call_0_lookup_account: {"error":"the account service is down"}',
            "model: I couldn't complete the account lookup for down@example.com: the account service is down.",
        ]
    )
    assert transcript(retried.all_messages()) == snapshot(
        [
            "user: check retry@example.com",
            'call call_0_lookup_account: lookup_account({"email":"retry@example.com"})',
            'retried call_0_lookup_account: {"error":"try another address"}',
            "model: I couldn't complete the account lookup for retry@example.com.",
        ]
    )


async def test_interrupted_call_is_reported() -> None:
    history: list[ModelMessage] = [
        ModelRequest(parts=[UserPromptPart("cancel ORD-9012")]),
        ModelResponse(
            parts=[
                ToolCallPart("cancel_order", {"order_id": "ORD-9012", "reason": "x"}, "call_0_cancel_order")
            ]
        ),
        ModelRequest(
            parts=[
                ToolReturnPart(
                    "cancel_order",
                    INTERRUPTED_TOOL_RETURN_CONTENT,
                    "call_0_cancel_order",
                    outcome="interrupted",
                )
            ]
        ),
    ]

    result = await make_agent().run(message_history=history)

    assert result.output == "I couldn't complete the cancellation of ORD-9012: it was interrupted."


async def test_refund_approved() -> None:
    agent = make_agent()
    paused = await agent.run("Please refund ORD-5678, it arrived broken")
    assert isinstance(paused.output, DeferredToolRequests)
    [call] = paused.output.approvals

    resumed = await agent.run(
        message_history=paused.all_messages(),
        deferred_tool_results=DeferredToolResults(approvals={call.tool_call_id: ToolApproved()}),
    )

    assert resumed.output == "Refunded $99.98 for ORD-5678."
    assert transcript(resumed.all_messages()) == snapshot(
        [
            "user: Please refund ORD-5678, it arrived broken",
            'call call_0_lookup_order: lookup_order({"order_id":"ORD-5678"})',
            'success call_0_lookup_order: {"order_id":"ORD-5678","item":"Widget Pro","quantity":2,"total":99.98,"status":"shipped","tracking":"TRK-111","refunded":0.0}',
            'call call_1_issue_refund: issue_refund({"order_id":"ORD-5678","amount":99.98,"reason":"Please refund ORD-5678, it arrived broken"})',
            'success call_1_issue_refund: {"order_id":"ORD-5678","refunded":99.98,"message":"Refunded $99.98 for ORD-5678."}',
            "model: Refunded $99.98 for ORD-5678.",
        ]
    )


async def test_refund_denied_quotes_the_reason() -> None:
    agent = make_agent()
    paused = await agent.run("refund ORD-9012 please")
    assert isinstance(paused.output, DeferredToolRequests)
    [call] = paused.output.approvals

    resumed = await agent.run(
        message_history=paused.all_messages(),
        deferred_tool_results=DeferredToolResults(approvals={call.tool_call_id: ToolDenied("too expensive")}),
    )

    assert transcript(resumed.new_messages()) == snapshot(
        [
            "denied call_1_issue_refund: too expensive",
            'model: The refund of $149.99 for ORD-9012 was rejected: "too expensive".',
        ]
    )


async def test_refund_denied_without_a_reason() -> None:
    agent = make_agent()
    paused = await agent.run("refund ORD-9012 please")
    assert isinstance(paused.output, DeferredToolRequests)

    resumed = await agent.run(
        message_history=paused.all_messages(),
        deferred_tool_results=DeferredToolResults(approvals={paused.output.approvals[0].tool_call_id: False}),
    )

    assert resumed.output == "The refund of $149.99 for ORD-9012 was rejected."


async def test_refund_of_an_unknown_order_answers_with_text() -> None:
    result = await make_agent().run("refund ORD-1111")

    assert transcript(result.all_messages()) == snapshot(
        [
            "user: refund ORD-1111",
            'call call_0_lookup_order: lookup_order({"order_id":"ORD-1111"})',
            'success call_0_lookup_order: {"error":"No order \'ORD-1111\' was found."}',
            "model: Sorry, I couldn't complete the lookup of order ORD-1111: No order 'ORD-1111' was found.",
        ]
    )


async def test_two_cancels_in_one_response_one_approved_one_denied() -> None:
    agent = make_agent()
    paused = await agent.run("Cancel ORD-9012 and ORD-3456")
    assert isinstance(paused.output, DeferredToolRequests)
    assert len(paused.all_messages()[-1].parts) == 2  # both calls in the one response
    first, second = paused.output.approvals

    resumed = await agent.run(
        message_history=paused.all_messages(),
        deferred_tool_results=DeferredToolResults(
            approvals={first.tool_call_id: True, second.tool_call_id: ToolDenied("already delivered")}
        ),
    )

    assert transcript(resumed.all_messages()) == snapshot(
        [
            "user: Cancel ORD-9012 and ORD-3456",
            'call call_0_cancel_order: cancel_order({"order_id":"ORD-9012","reason":"Cancel ORD-9012 and ORD-3456"})',
            'call call_1_cancel_order: cancel_order({"order_id":"ORD-3456","reason":"Cancel ORD-9012 and ORD-3456"})',
            'success call_0_cancel_order: {"order_id":"ORD-9012","status":"cancelled"}',
            "denied call_1_cancel_order: already delivered",
            'model: Order ORD-9012 is cancelled. The cancellation of ORD-3456 was rejected: "already delivered".',
        ]
    )


async def test_loop_forever_hits_the_request_limit() -> None:
    with capture_run_messages() as messages, pytest.raises(UsageLimitExceeded):
        await make_agent().run("loop forever", usage_limits=UsageLimits(request_limit=5))

    calls = [part for message in messages for part in message.parts if isinstance(part, ToolCallPart)]
    assert [plain(call.tool_call_id) for call in calls] == snapshot(
        [
            "call_0_lookup_order",
            "call_1_lookup_order",
            "call_2_lookup_order",
            "call_3_lookup_order",
            "call_4_lookup_order",
        ]
    )
    assert {call.args_as_json_str() for call in calls} == {'{"order_id":"ORD-5678"}'}


async def test_feedback_records_the_users_messages() -> None:
    agent = make_agent()
    first = await agent.run("hello")
    result = await agent.run(
        "Feedback: the delivery was late and the support was rude. Please contact me.",
        message_history=first.all_messages(),
    )

    assert transcript(result.new_messages()) == snapshot(
        [
            "user: Feedback: the delivery was late and the support was rude. Please contact me.",
            'call call_0_record_feedback: record_feedback({"conversation":"hello\\nFeedback: the delivery was late and the support was rude. Please contact me."})',
            'success call_0_record_feedback: {"sentiment":"negative","topics":["shipping","support"],"summary":"hello Feedback: the delivery was late and the support was rude. Please contact me.","follow_up_needed":true}',
            "model: Thanks, I've recorded your feedback (sentiment: negative).",
        ]
    )


async def test_text_streams_word_by_word() -> None:
    deltas: list[str] = []
    async with make_agent().run_stream_events("Where is ORD-3456?") as events:
        async for event in events:
            if isinstance(event, PartDeltaEvent) and isinstance(event.delta, TextPartDelta):
                deltas.append(event.delta.content_delta)

    assert len(deltas) > 1
    assert deltas[:3] == ["ORD-3456: ", "Cable ", "Kit "]


@pytest.mark.parametrize(
    "prompt",
    ["hello", "Where is ORD-5678?", "refund ORD-5678", "cancel ORD-5678 and ORD-9012", "stack trace"],
)
async def test_streamed_and_requested_responses_agree(prompt: str) -> None:
    agent = make_agent()
    requested = await agent.run(prompt)
    streamed = await run_streamed(agent, prompt)

    assert transcript(streamed.all_messages()) == transcript(requested.all_messages())


async def test_tool_call_ids_are_unique_in_a_conversation_also_when_a_turn_is_asked_again() -> None:
    agent = make_agent()
    first = await agent.run("Where is ORD-5678?")
    second = await agent.run("And ORD-9012?", message_history=first.all_messages())
    asked_again = await agent.run("And ORD-9012?", message_history=first.all_messages())  # a regenerated turn

    def ids(messages: Sequence[ModelMessage]) -> list[str]:
        return [part.tool_call_id for m in messages for part in m.parts if isinstance(part, ToolCallPart)]

    assert [plain(i) for i in ids(second.all_messages())] == ["call_0_lookup_order", "call_1_lookup_order"]
    assert (
        len(set(ids(second.all_messages()) + ids(asked_again.all_messages()))) == 3
    )  # only the first is shared
    # The same question asked again gets the same answer, under its own ids.
    assert transcript(asked_again.all_messages()) == transcript(second.all_messages())


async def test_feedback_agent_returns_valid_feedback() -> None:
    result = await feedback_agent.run(
        "I love the Widget Pro, shipping was fast. Thanks!", model=feedback_model_for(demo_model())
    )

    assert result.output == snapshot(
        Feedback(
            sentiment="positive",
            topics=["shipping", "product"],
            summary="I love the Widget Pro, shipping was fast. Thanks!",
            follow_up_needed=False,
        )
    )


async def test_feedback_agent_streams_and_serves_prompted_output() -> None:
    text = "The cable kit is okay. Call me about the invoice."
    expected = analyze_feedback(text)

    streamed = await run_streamed(Agent(feedback_model(), output_type=Feedback), text)
    prompted = await Agent(feedback_model(), output_type=PromptedOutput(Feedback)).run(text)

    assert streamed.output == expected
    assert prompted.output == expected
    assert expected == snapshot(
        Feedback(
            sentiment="neutral",
            topics=["product", "billing"],
            summary="The cable kit is okay. Call me about the invoice.",
            follow_up_needed=True,
        )
    )


def test_analyze_feedback_summary_is_the_first_120_characters() -> None:
    feedback = analyze_feedback("word " * 100)

    assert feedback.summary == ("word " * 24).strip()
    assert feedback.topics == ["general"]
    assert feedback.sentiment == "neutral"


def test_the_feedback_sub_agent_runs_on_the_calling_agents_model() -> None:
    # The demo model cannot write a Feedback: the offline feedback model stands in for it...
    assert feedback_model_for(demo_model()).model_name == "demo-feedback"
    # ...while a real provider's model (any other) is used as it is.
    scripted = FunctionModel(lambda messages, info: ModelResponse(parts=[TextPart("x")]), model_name="gpt-x")
    assert feedback_model_for(scripted) is scripted
