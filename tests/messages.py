"""Realistic pydantic-ai messages, for the store's tests and its benchmark.

Every value is deterministic: the same arguments build equal messages, so two stores fed the same
turns can be compared message for message.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

from pydantic_ai.messages import (
    AudioUrl,
    BinaryContent,
    Citation,
    DocumentUrl,
    FilePart,
    ImageUrl,
    ModelMessage,
    ModelRequest,
    ModelResponse,
    NativeToolCallPart,
    NativeToolReturnPart,
    RetryFeedbackPart,
    RetryInfo,
    SystemPromptPart,
    TextContent,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
    VideoUrl,
    WebCitationSource,
)
from pydantic_ai.tools import DeferredToolRequests
from pydantic_ai.usage import RequestUsage, RunUsage

__all__ = (
    "PNG_PIXEL",
    "full_fidelity_conversation",
    "full_fidelity_deferred_tool_requests",
    "full_fidelity_usage",
    "realistic_turn",
)

PNG_PIXEL = bytes.fromhex(
    "89504e470d0a1a0a0000000d49484452000000010000000108060000001f15c489"
    "0000000d49444154789c6360f8cfc0f01f0005000201e226059b0000000049454e44ae426082"
)
"""A 1x1 PNG: real image bytes, not valid UTF-8, so a store that mangles bytes shows it."""

_START = datetime(2025, 3, 14, 9, 26, 53, 589793, tzinfo=UTC)
_BERLIN_WINTER = timezone(timedelta(hours=1))

_PROMPT = (
    "I'm planning the data migration for order history {i}: about two million rows move from the old "
    "MySQL cluster to PostgreSQL this weekend. What should I check before the cutover, and in what order?"
)
_REPLY = (
    "For migration {i}, check in this order. First, freeze the schema on the source and diff it against "
    "the target: column types, nullability, defaults and collations, because MySQL's utf8mb4_general_ci "
    "compares differently from PostgreSQL's ICU collations and unique indexes can start rejecting rows. "
    "Second, run a dry copy into a staging database and compare row counts and a checksum per table. "
    "Third, rehearse the cutover with the application pointed at staging, measuring how long the final "
    "incremental sync takes, since that is your write downtime. Finally, keep the old cluster read-only."
)


def realistic_turn(i: int) -> list[ModelMessage]:
    """Turn `i` of a chat: a ~200-character prompt and a ~600-character reply.

    Every third turn (`i % 3 == 0`) the model first calls a tool with ~150 bytes of arguments and gets
    a ~1 KB result back, as a chat with tools does.
    """
    at = _START + timedelta(minutes=i)
    messages: list[ModelMessage] = [
        ModelRequest(
            parts=[UserPromptPart(_PROMPT.format(i=i), timestamp=at)],
            timestamp=at,
            run_id=f"run-{i}",
        )
    ]
    if i % 3 == 0:
        tool_call_id = f"call_{i:06d}"
        messages += [
            ModelResponse(
                parts=[
                    ToolCallPart(
                        "query_table_stats",
                        {
                            "database": "orders_legacy",
                            "tables": ["orders", "order_items", "refunds"],
                            "include": ["row_count", "checksum", "size_bytes"],
                            "timeout_s": 30,
                            "turn": i,
                        },
                        tool_call_id,
                    )
                ],
                usage=RequestUsage(input_tokens=900 + i, output_tokens=40),
                model_name="gpt-5.2",
                provider_name="openai",
                provider_response_id=f"resp_tool_{i}",
                finish_reason="tool_call",
                timestamp=at + timedelta(seconds=1),
                run_id=f"run-{i}",
            ),
            ModelRequest(
                parts=[
                    ToolReturnPart(
                        "query_table_stats",
                        {
                            "tables": [
                                {
                                    "name": name,
                                    "row_count": 1_000_000 + 37 * i + index,
                                    "size_bytes": 4_096 * (1_000 + 37 * i + index),
                                    "checksum": f"{(i * 7919 + index * 104729):032x}",
                                    "last_analyzed": "2025-03-13T22:00:00Z",
                                    "notes": "collation utf8mb4_general_ci; no unique index on external_ref",
                                }
                                for index, name in enumerate(["orders", "order_items", "refunds", "payments"])
                            ],
                            "cluster": "mysql-orders-legacy-3.internal",
                        },
                        tool_call_id,
                        timestamp=at + timedelta(seconds=2),
                    )
                ],
                timestamp=at + timedelta(seconds=2),
                run_id=f"run-{i}",
            ),
        ]
    messages.append(
        ModelResponse(
            parts=[TextPart(_REPLY.format(i=i))],
            usage=RequestUsage(input_tokens=1_200 + i, output_tokens=150, cache_read_tokens=1_024),
            model_name="gpt-5.2",
            provider_name="openai",
            provider_response_id=f"resp_{i}",
            finish_reason="stop",
            timestamp=at + timedelta(seconds=3),
            run_id=f"run-{i}",
        )
    )
    return messages


def full_fidelity_conversation() -> list[ModelMessage]:
    """A conversation holding every kind of message part, with every optional field a store must keep set."""
    at = _START
    return [
        ModelRequest(
            parts=[
                SystemPromptPart("You are a careful assistant for a logistics company.", timestamp=at),
                UserPromptPart(
                    [
                        "Compare this chart with the report, the call and the clip, then check the weather.",
                        ImageUrl("https://example.com/chart.png", vendor_metadata={"detail": "high"}),
                        BinaryContent(PNG_PIXEL, media_type="image/png"),
                        DocumentUrl("https://example.com/report.pdf", media_type="application/pdf"),
                        AudioUrl("https://example.com/call.mp3"),
                        VideoUrl("https://example.com/clip.mp4", force_download=True),
                        TextContent("Ticket #4711", metadata={"source": "helpdesk"}),
                    ],
                    # Not UTC, so a store that drops or normalizes the offset shows it.
                    timestamp=at.astimezone(_BERLIN_WINTER),
                ),
            ],
            timestamp=at,
            instructions="Answer in English. Cite your sources.",
            run_id="run-fidelity-1",
            conversation_id="fidelity",
            metadata={"client": {"name": "web", "version": [1, 4, 2]}},
        ),
        ModelResponse(
            parts=[
                ThinkingPart(
                    "The user wants a comparison; first fetch the weather, then look up the shipment.",
                    id="rs_1",
                    signature="EqQBCkYIARgCKkBsig+/==",
                    provider_name="anthropic",
                    provider_details={"redacted": False},
                ),
                TextPart(
                    "Let me look that up.",
                    id="msg_1",
                    citations=[
                        Citation(
                            [
                                WebCitationSource(
                                    "https://example.com/weather", title="Weather", excerpts=["sunny"]
                                )
                            ]
                        )
                    ],
                ),
                ToolCallPart(
                    "get_weather", {"city": "Zürich", "days": [1, 2], "units": {"temp": "C"}}, "call_dict"
                ),
                ToolCallPart("lookup_shipment", '{"tracking": "1Z999AA1", "verbose": true}', "call_json"),
                NativeToolCallPart(
                    "web_search", {"query": "port of Hamburg strike"}, "srvtool_1", provider_name="anthropic"
                ),
                NativeToolReturnPart(
                    "web_search",
                    [{"url": "https://example.com/news", "title": "Strike ends", "page_age": None}],
                    "srvtool_1",
                    provider_name="anthropic",
                    timestamp=at + timedelta(seconds=1),
                ),
            ],
            usage=RequestUsage(
                input_tokens=1_523,
                cache_write_tokens=1_024,
                cache_read_tokens=256,
                output_tokens=210,
                details={"reasoning_tokens": 96, "accepted_prediction_tokens": 3},
            ),
            model_name="claude-sonnet-4-5",
            provider_name="anthropic",
            provider_url="https://api.anthropic.com",
            provider_details={"stop_sequence": None, "container": {"id": "c_1"}},
            provider_response_id="msg_01XFDUDYJgAACzvnptvVoYEL",
            finish_reason="tool_call",
            timestamp=at + timedelta(seconds=2),
            run_id="run-fidelity-1",
            metadata={"latency_ms": 812},
        ),
        ModelRequest(
            parts=[
                ToolReturnPart(
                    "get_weather",
                    {
                        "forecast": [{"day": 1, "temp": 21.5, "sky": "sunny"}, {"day": 2, "temp": None}],
                        "ok": True,
                    },
                    "call_dict",
                    metadata={"cache": "miss"},
                    timestamp=at + timedelta(seconds=3),
                ),
                ToolReturnPart(
                    "lookup_shipment",
                    [
                        "Shipment photo attached:",
                        BinaryContent(PNG_PIXEL, media_type="image/png"),
                        {"status": "late"},
                    ],
                    "call_json",
                    timestamp=at + timedelta(seconds=3),
                ),
                ToolReturnPart(
                    "lookup_shipment",
                    "tracking number must have 18 characters",
                    "call_retry",
                    outcome="retried",
                    retry=RetryInfo("validation_error", attempt=1, max_retries=3),
                    timestamp=at + timedelta(seconds=3),
                ),
                RetryFeedbackPart(
                    "Please answer with a table.",
                    retry=RetryInfo("model_retry", attempt=1, max_retries=2),
                    timestamp=at + timedelta(seconds=3),
                ),
            ],
            timestamp=at + timedelta(seconds=3),
            run_id="run-fidelity-1",
        ),
        ModelResponse(
            parts=[
                TextPart("Sunny in Zürich; the shipment is late. Here is the chart you asked for:"),
                FilePart(
                    BinaryContent(PNG_PIXEL, media_type="image/png"), id="file_1", provider_name="openai"
                ),
            ],
            usage=RequestUsage(input_tokens=2_048, output_tokens=64, details={"reasoning_tokens": 0}),
            model_name="gpt-5.2",
            provider_name="openai",
            provider_response_id="resp_2",
            finish_reason="stop",
            timestamp=at + timedelta(seconds=4),
            run_id="run-fidelity-1",
        ),
    ]


def full_fidelity_usage() -> RunUsage:
    """The running usage a conversation carries, with every counter set."""
    return RunUsage(
        requests=2,
        tool_calls=3,
        input_tokens=3_571,
        cache_write_tokens=1_024,
        cache_read_tokens=256,
        output_tokens=274,
        details={"reasoning_tokens": 96},
    )


def full_fidelity_deferred_tool_requests() -> DeferredToolRequests:
    """A paused run's pending calls: an external call, a question and an approval, with metadata."""
    return DeferredToolRequests(
        calls=[
            ToolCallPart("run_report", {"quarter": "2025Q1"}, "call_external"),
            ToolCallPart("ask_user", {"question": "Which warehouse?"}, "call_question"),
        ],
        approvals=[ToolCallPart("refund_order", '{"order_id": 4711, "amount": "19.90"}', "call_approval")],
        metadata={"call_approval": {"reason": "refund over limit", "limit": 10}, "call_external": {}},
        _kinds={"call_question": "question"},
    )
