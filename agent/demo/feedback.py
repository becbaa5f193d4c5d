"""The feedback sub-agent: turns a conversation into a structured `Feedback` record.

The sub-agent runs on the model of the run that calls it (`feedback_model_for`): with a real
provider it follows `FEEDBACK_INSTRUCTIONS`; on the offline demo model, `feedback_model()` derives
the record deterministically from keywords in the conversation text.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from typing import Any, Literal

from pydantic import BaseModel, Field
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models import AbstractModel, Model
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, DeltaToolCalls, FunctionModel

from .model import DEMO_MODEL_NAME, user_messages

__all__ = (
    "FEEDBACK_INSTRUCTIONS",
    "FEEDBACK_KIND",
    "Feedback",
    "analyze_feedback",
    "feedback_agent",
    "feedback_model",
    "feedback_model_for",
)

FEEDBACK_KIND = "feedback"
"""The kind of the records `record_feedback` saves."""

Sentiment = Literal["positive", "neutral", "negative"]


class Feedback(BaseModel):
    """Customer feedback, as structured data."""

    sentiment: Sentiment = Field(description="The customer's overall sentiment.")
    topics: list[str] = Field(
        description="What the feedback is about, in lower case: shipping, refund, returns, product, support, billing…"
    )
    summary: str = Field(description="One or two sentences summarizing the feedback in neutral language.")
    follow_up_needed: bool = Field(
        description="Whether someone should contact the customer: they are unhappy or asked to be contacted."
    )


FEEDBACK_INSTRUCTIONS = (
    "You analyze customer feedback from a support conversation. Judge the customer's overall sentiment, "
    "list the topics the feedback is about as short lower-case words (shipping, refund, returns, product, "
    "support, billing, or another fitting word), and summarize it in one or two neutral sentences. "
    "Set follow_up_needed when the customer is unhappy or asks to be contacted. Never invent details "
    "that are not in the conversation."
)

_POSITIVE = (
    "great", "love", "loved", "excellent", "thanks", "thank", "happy", "awesome", "fast", "helpful",
    "perfect", "good", "amazing", "pleased", "satisfied",
)  # fmt: skip
_NEGATIVE = (
    "bad", "terrible", "awful", "slow", "broken", "angry", "disappointed", "disappointing", "hate",
    "worst", "late", "damaged", "frustrated", "frustrating", "poor", "unhappy", "useless", "rude", "never",
)  # fmt: skip
_TOPICS = {
    "shipping": ("shipping", "shipped", "delivery", "delivered", "tracking", "courier", "arrived", "late"),
    "refund": ("refund", "refunded", "money back", "reimburse"),
    "returns": ("return", "returns", "returned"),
    "product": ("product", "quality", "broken", "damaged", "widget", "gadget", "cable", "item"),
    "support": ("support", "agent", "service", "staff", "help", "helpful", "rude"),
    "billing": ("bill", "billing", "invoice", "charge", "charged", "price", "payment"),
}
_FOLLOW_UP = ("call me", "contact")
_WORD = re.compile(r"[a-z']+")


def analyze_feedback(text: str) -> Feedback:
    """The demo analysis: sentiment and topics from keyword lists, the summary from the text itself."""
    lowered = " ".join(text.lower().split())
    words = _WORD.findall(lowered)
    score = sum(word in _POSITIVE for word in words) - sum(word in _NEGATIVE for word in words)
    sentiment: Sentiment = "positive" if score > 0 else "negative" if score < 0 else "neutral"
    topics = [topic for topic, keys in _TOPICS.items() if any(_mentions(lowered, words, key) for key in keys)]
    return Feedback(
        sentiment=sentiment,
        topics=topics or ["general"],
        summary=" ".join(text.split())[:120].rstrip(),
        follow_up_needed=sentiment == "negative" or any(phrase in lowered for phrase in _FOLLOW_UP),
    )


def feedback_model() -> FunctionModel:
    """A deterministic offline model for the feedback sub-agent, named `demo-feedback`.

    It answers with the first output tool the agent offers, or with the JSON text when there is none
    (prompted or native output).
    """
    return FunctionModel(_request, stream_function=_stream, model_name="demo-feedback")


feedback_agent: Agent[None, Feedback] = Agent(
    output_type=Feedback, instructions=FEEDBACK_INSTRUCTIONS, name="feedback"
)
"""The feedback sub-agent; each run names its model (`feedback_model_for`)."""


def feedback_model_for(model: AbstractModel) -> Model[Any]:
    """The model the sub-agent runs on when the shop's agent runs on `model`: the same one, but
    the offline demo feedback model in place of the demo model, which cannot write a `Feedback`."""
    if model.model_name == DEMO_MODEL_NAME:
        return feedback_model()
    if not isinstance(model, Model):
        raise TypeError(f"the feedback sub-agent cannot run on {type(model).__name__}")
    same: Model[Any] = model  # pyright: ignore[reportUnknownVariableType]  # any provider's client
    return same


def _mentions(lowered: str, words: list[str], key: str) -> bool:
    return key in lowered if " " in key else key in words


def _answer(messages: list[ModelMessage], info: AgentInfo) -> tuple[str, str] | str:
    """The output tool's name and JSON arguments, or the JSON text when no output tool is offered."""
    feedback = analyze_feedback("\n".join(user_messages(messages))).model_dump_json()
    if info.output_tools:
        return info.output_tools[0].name, feedback
    return feedback


async def _request(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    answer = _answer(messages, info)
    if isinstance(answer, str):
        return ModelResponse(parts=[TextPart(answer)])
    tool_name, args = answer
    return ModelResponse(parts=[ToolCallPart(tool_name, args, tool_call_id=f"call_feedback_{tool_name}")])


async def _stream(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str | DeltaToolCalls]:
    answer = _answer(messages, info)
    if isinstance(answer, str):
        yield answer
        return
    tool_name, args = answer
    yield {0: DeltaToolCall(name=tool_name, json_args=args, tool_call_id=f"call_feedback_{tool_name}")}
