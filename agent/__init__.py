"""The agent core: the customer-service agent, its tools, the demo model and the step function."""

from __future__ import annotations

from .approvals import decide
from .assistant import INSTRUCTIONS, SupportAgent, build_agent
from .demo_model import demo_model, resolve_model
from .eventlog import EventLogSink, Publisher, stored_events
from .feedback import Feedback, feedback_agent, feedback_model
from .step import Runtime, run_step
from .tools import APPROVAL_TOOLS, TOOLS, Deps, InvalidArguments, RecordBuffer, validate_args

__all__ = (
    "APPROVAL_TOOLS",
    "INSTRUCTIONS",
    "TOOLS",
    "Deps",
    "EventLogSink",
    "Feedback",
    "InvalidArguments",
    "Publisher",
    "RecordBuffer",
    "Runtime",
    "SupportAgent",
    "build_agent",
    "decide",
    "demo_model",
    "feedback_agent",
    "feedback_model",
    "resolve_model",
    "run_step",
    "stored_events",
    "validate_args",
)
