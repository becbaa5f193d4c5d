"""The demo model: a deterministic, offline `FunctionModel` so the product works without an API key.

It reads only the conversation. The latest user message picks a row of the architecture's table
("The demo model"); tool results after that message are answered with a short text that uses them.
Text is streamed word by word. Tool call ids are `call_<n>_<tool>_<run>`: `n` counts the calls already made in the conversation, and
`run` is a digest of the run that asks (pydantic-ai stamps it on each request), so a reply asked for
again (a regenerated turn, a new branch) gets ids of its own, as a provider's would: durable-chat keys
approvals, the exactly-once ledger and records by tool call id within a thread.
Both the streamed and the plain response carry the arguments as the same JSON text, so a conversation
is the same message for message whichever way it was run.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any, Literal, cast

from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    ModelResponsePart,
    RetryPromptPart,  # pyright: ignore[reportDeprecated] -- a legacy history may still hold one
    TextContent,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, DeltaToolCalls, FunctionModel
from pydantic_ai.tools import ToolDenied

__all__ = ("DEFAULT_ORDER_ID", "DEMO_MODEL_NAME", "demo_model", "user_messages")

DEMO_MODEL_NAME = "demo"

DEFAULT_ORDER_ID = "ORD-5678"
"""The order the `loop forever` row looks up when the message names none."""

ORDER_ID = re.compile(r"ORD-\d+", re.IGNORECASE)
EMAIL = re.compile(r"[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}")
FAQ_TOPICS = re.compile(r"shipping|returns|warranty", re.IGNORECASE)
_DEFAULT_DENIAL = ToolDenied().message
"""What a bare `ToolDenied()` (or an approval of `False`) says: no reason worth quoting."""

GREETING = (
    "Hi! I'm the demo support assistant. I can look up orders (try ORD-5678) and accounts by e-mail, "
    "answer shipping, returns and warranty questions, issue refunds and cancel orders once a person "
    "approves, and record your feedback."
)
LEAK = (
    "Oops, an internal error occurred. Here is the stack trace: Traceback (most recent call last): "
    'File "/srv/app/orders.py", line 42, in lookup: database connection refused for '
    "postgres://app@10.0.0.5:5432/prod with api_secret=sk-live-demo-0000."
)

_Row = Literal["leak", "loop", "feedback", "refund", "cancel", "order", "account", "faq", "greeting"]
_Outcome = Literal["success", "failed", "denied", "interrupted", "retried"]


@dataclass(frozen=True)
class _Call:
    tool_name: str
    args: dict[str, Any]


@dataclass(frozen=True)
class _Result:
    tool_name: str
    outcome: _Outcome
    data: dict[str, Any]
    """The content as a JSON object; anything else is under `"return_value"`."""
    text: str
    """The content as the model would read it, unwrapped."""
    args: dict[str, Any]
    """The arguments of the call this answers, `{}` if the call is not in the conversation."""


def demo_model(*, delay: float = 0.0) -> FunctionModel:
    """The deterministic demo model, named `demo`.

    Args:
        delay: Seconds it thinks before each response, as a slow provider would: tests hold a run
            between two model calls with it (to kill its worker there).
    """
    if not delay:
        return FunctionModel(_request, stream_function=_stream, model_name=DEMO_MODEL_NAME)

    async def request(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        await asyncio.sleep(delay)
        return await _request(messages, info)

    async def stream(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str | DeltaToolCalls]:
        await asyncio.sleep(delay)
        async for item in _stream(messages, info):
            yield item

    return FunctionModel(request, stream_function=stream, model_name=DEMO_MODEL_NAME)


def user_messages(messages: Sequence[ModelMessage]) -> list[str]:
    """The text of every user prompt in the conversation, in order."""
    return [_prompt_text(part) for part in _user_prompts(messages)]


async def _request(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    reply = _reply(messages)
    parts: list[ModelResponsePart]
    if isinstance(reply, str):
        parts = [TextPart(reply)]
    else:
        parts = [
            ToolCallPart(call.tool_name, json.dumps(call.args), tool_call_id=tool_call_id)
            for tool_call_id, call in _with_ids(messages, reply)
        ]
    return ModelResponse(parts=parts)


async def _stream(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str | DeltaToolCalls]:
    reply = _reply(messages)
    if isinstance(reply, str):
        words = reply.split(" ")
        for word in words[:-1]:
            yield f"{word} "
        yield words[-1]
        return
    for index, (tool_call_id, call) in enumerate(_with_ids(messages, reply)):
        yield {index: DeltaToolCall(name=call.tool_name, tool_call_id=tool_call_id)}
        yield {index: DeltaToolCall(json_args=json.dumps(call.args))}


def _with_ids(messages: Sequence[ModelMessage], calls: list[_Call]) -> list[tuple[str, _Call]]:
    made = sum(
        isinstance(part, ToolCallPart)
        for message in messages
        if isinstance(message, ModelResponse)
        for part in message.parts
    )
    asking = next(
        (message.run_id for message in reversed(messages) if isinstance(message, ModelRequest)), None
    )
    run = hashlib.sha256((asking or "").encode()).hexdigest()[:6]
    return [(f"call_{made + offset}_{call.tool_name}_{run}", call) for offset, call in enumerate(calls)]


def _reply(messages: Sequence[ModelMessage]) -> str | list[_Call]:
    """What the model answers: a text, or the tool calls of one response."""
    prompts = _user_prompts(messages)
    prompt = _prompt_text(prompts[-1]) if prompts else ""
    row = _row(prompt)
    results = _latest_results(messages)
    if not results:
        return _first_reply(row, prompt, messages)
    if row == "loop":
        return [_lookup(prompt)]
    if row == "refund":
        # Only a successful lookup leads on to the refund; a missing order is answered with text.
        lookup = next((r for r in results if r.tool_name == "lookup_order" and r.outcome == "success"), None)
        amount = _dollars(lookup.data.get("total")) if lookup and "error" not in lookup.data else None
        if lookup and amount is not None:
            order_id = str(lookup.data.get("order_id") or lookup.args.get("order_id"))
            return [_Call("issue_refund", {"order_id": order_id, "amount": amount, "reason": prompt})]
    return " ".join(_describe(result) for result in results)


def _row(prompt: str) -> _Row:
    lowered = prompt.lower()
    order_ids = ORDER_ID.findall(prompt)
    if "stack trace" in lowered:
        return "leak"
    if "loop forever" in lowered:
        return "loop"
    if "feedback" in lowered:
        return "feedback"
    if "refund" in lowered and order_ids:
        return "refund"
    if "cancel" in lowered and order_ids:
        return "cancel"
    if order_ids:
        return "order"
    if EMAIL.search(prompt):
        return "account"
    if FAQ_TOPICS.search(prompt):
        return "faq"
    return "greeting"


def _first_reply(row: _Row, prompt: str, messages: Sequence[ModelMessage]) -> str | list[_Call]:
    order_ids = list(dict.fromkeys(match.upper() for match in ORDER_ID.findall(prompt)))
    match row:
        case "leak":
            return LEAK
        case "loop" | "refund" | "order":
            return [_lookup(prompt)]
        case "feedback":
            return [_Call("record_feedback", {"conversation": "\n".join(user_messages(messages))})]
        case "cancel":
            return [_Call("cancel_order", {"order_id": order_id, "reason": prompt}) for order_id in order_ids]
        case "account":
            email = EMAIL.search(prompt)
            return [_Call("lookup_account", {"email": email.group().lower() if email else ""})]
        case "faq":
            topic = FAQ_TOPICS.search(prompt)
            return [_Call("search_faq", {"query": topic.group().lower() if topic else ""})]
        case "greeting":
            return GREETING


def _lookup(prompt: str) -> _Call:
    found = ORDER_ID.search(prompt)
    return _Call("lookup_order", {"order_id": found.group().upper() if found else DEFAULT_ORDER_ID})


def _user_prompts(messages: Sequence[ModelMessage]) -> list[UserPromptPart]:
    return [
        part
        for message in messages
        if isinstance(message, ModelRequest)
        for part in message.parts
        if isinstance(part, UserPromptPart)
    ]


def _prompt_text(part: UserPromptPart) -> str:
    if isinstance(part.content, str):
        return part.content
    texts = [
        item if isinstance(item, str) else item.content
        for item in part.content
        if isinstance(item, str | TextContent)
    ]
    return " ".join(texts)


def _latest_results(messages: Sequence[ModelMessage]) -> list[_Result]:
    """The tool results of the last request, if they come after the latest user prompt."""
    if not messages or not isinstance(last := messages[-1], ModelRequest):
        return []
    parts = list(last.parts)
    prompt_at = max((i for i, part in enumerate(parts) if isinstance(part, UserPromptPart)), default=-1)
    calls = {
        part.tool_call_id: part.args_as_dict()
        for message in messages
        if isinstance(message, ModelResponse)
        for part in message.parts
        if isinstance(part, ToolCallPart)
    }
    results: list[_Result] = []
    for part in parts[prompt_at + 1 :]:
        if isinstance(part, ToolReturnPart):
            structured = part.structured_content()
            data = (
                structured
                if isinstance(structured, dict)
                else part.model_response_object(wrap_if_error=False)
            )
            text = part.model_response_str(wrap_if_error=False)
            results.append(
                _Result(part.tool_name, part.outcome, data, text, calls.get(part.tool_call_id, {}))
            )
        elif isinstance(part, RetryPromptPart) and part.tool_name:  # pyright: ignore[reportDeprecated]
            content = part.content if isinstance(part.content, str) else ""
            results.append(_Result(part.tool_name, "retried", {}, content, calls.get(part.tool_call_id, {})))
    return results


def _describe(result: _Result) -> str:
    """One or two sentences about a tool result, for the user."""
    subject = _subject(result.tool_name, result.args)
    match result.outcome:
        case "denied" if result.text and result.text != _DEFAULT_DENIAL:
            return f'The {subject} was rejected: "{result.text}".'
        case "denied":
            return f"The {subject} was rejected."
        case "interrupted":
            return f"I couldn't complete the {subject}: it was interrupted."
        case "failed" | "retried":
            reason = result.text if result.outcome == "failed" and 0 < len(result.text) <= 200 else ""
            return f"I couldn't complete the {subject}" + (f": {_sentence(reason)}" if reason else ".")
        case "success":
            return _describe_success(result)


def _subject(tool_name: str, args: dict[str, Any]) -> str:
    order_id, amount = args.get("order_id", "the order"), _dollars(args.get("amount"))
    match tool_name:
        case "issue_refund":
            return (
                f"refund of {_money(amount)} for {order_id}"
                if amount is not None
                else f"refund for {order_id}"
            )
        case "cancel_order":
            return f"cancellation of {order_id}"
        case "lookup_order":
            return f"lookup of order {order_id}"
        case "lookup_account":
            return f"account lookup for {args.get('email', 'that address')}"
        case "search_faq":
            return f'FAQ search for "{args.get("query", "")}"'
        case "record_feedback":
            return "recording of your feedback"
        case _:
            return f"call to {tool_name}"


def _describe_success(result: _Result) -> str:
    data, args = result.data, result.args
    if isinstance(message := data.get("message"), str) and message:
        return _sentence(message)
    if isinstance(error := data.get("error"), str) and error:
        return f"Sorry, I couldn't complete the {_subject(result.tool_name, args)}: {_sentence(error)}"
    match result.tool_name:
        case "lookup_order" if {"item", "quantity", "total", "status"} <= data.keys():
            tracking = f" (tracking {data['tracking']})" if data.get("tracking") else ""
            refunded = _dollars(data.get("refunded"))
            refund_note = f", {_money(refunded)} refunded" if refunded else ""
            order_id = data.get("order_id", args.get("order_id"))
            return (
                f"Order {order_id}: {data['item']} x{data['quantity']}, {_money(_dollars(data['total']))}, "
                f"{data['status']}{tracking}{refund_note}."
            )
        case "lookup_account" if "name" in data:
            plan = data.get("plan") or data.get("tier")
            since = data.get("member_since") or data.get("since")
            details = "".join([f", {plan} plan" if plan else "", f", member since {since}" if since else ""])
            return f"Account {data.get('email', args.get('email'))}: {data['name']}{details}."
        case "search_faq":
            return _faq_answer(data, args)
        case "issue_refund":
            refunded = _dollars(data.get("refunded", args.get("amount")))
            return f"Refunded {_money(refunded)} for {args.get('order_id', data.get('order_id'))}."
        case "cancel_order":
            return f"Order {args.get('order_id', data.get('order_id'))} is cancelled."
        case "record_feedback":
            sentiment = data.get("sentiment")
            return "Thanks, I've recorded your feedback" + (
                f" (sentiment: {sentiment})." if sentiment else "."
            )
        case _:
            return f"The {_subject(result.tool_name, args)} returned: {result.text}"


def _faq_answer(data: dict[str, Any], args: dict[str, Any]) -> str:
    """The help-center answers, from `{"answers": [{"answer": ...}]}`, `{"answer": ...}` or plain text."""
    entries: list[object] = data["answers"] if isinstance(data.get("answers"), list) else [data]
    answers = [_sentence(answer) for entry in entries if (answer := _text_field(entry, "answer"))]
    if text := _text_field(data, "return_value"):
        answers.append(_sentence(text))
    if answers:
        return " ".join(answers)
    return f'I found no help-center answer about "{args.get("query", "that")}"; I can connect you with our support team.'


def _text_field(value: object, key: str) -> str | None:
    if not isinstance(value, dict):
        return None
    field = cast("dict[str, object]", value).get(key)  # a JSON object, so its keys are strings
    return field if isinstance(field, str) else None


def _dollars(value: object) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return round(float(value), 2)
    if isinstance(value, str):
        try:
            return round(float(value.strip().lstrip("$")), 2)
        except ValueError:
            return None
    return None


def _money(amount: float | None) -> str:
    return "an unknown amount" if amount is None else f"${amount:.2f}"


def _sentence(text: str) -> str:
    text = text.strip()
    return text if text.endswith((".", "!", "?")) else f"{text}."
