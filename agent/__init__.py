"""The agent core: the customer-service agent, its tools, the demo model and the step function."""

from __future__ import annotations

from .approvals import decide
from .assistant import INSTRUCTIONS, SupportAgent, build_agent
from .cancellation import Cancellation, cancel, interrupted_messages
from .demo_model import demo_model, resolve_model
from .eventlog import EventLogSink, Publisher, stored_events
from .feedback import Feedback, feedback_agent, feedback_model
from .guardrails import (
    Guardrail,
    GuardrailContext,
    Guardrails,
    MessageRate,
    PatternGuardrail,
    default_guardrails,
    injection_guardrail,
    leak_guardrail,
)
from .retries import ModelRetries
from .step import Runtime, run_step
from .tool_failures import ToolFailures
from .tools import APPROVAL_TOOLS, TOOLS, Deps, InvalidArguments, RecordBuffer, validate_args

__all__ = (
    "APPROVAL_TOOLS",
    "INSTRUCTIONS",
    "TOOLS",
    "Cancellation",
    "Deps",
    "EventLogSink",
    "Feedback",
    "Guardrail",
    "GuardrailContext",
    "Guardrails",
    "InvalidArguments",
    "MessageRate",
    "ModelRetries",
    "PatternGuardrail",
    "Publisher",
    "RecordBuffer",
    "Runtime",
    "SupportAgent",
    "ToolFailures",
    "build_agent",
    "cancel",
    "decide",
    "default_guardrails",
    "demo_model",
    "feedback_agent",
    "feedback_model",
    "injection_guardrail",
    "interrupted_messages",
    "leak_guardrail",
    "resolve_model",
    "run_step",
    "stored_events",
    "validate_args",
)
