"""The agent core: the `ChatApp` seam, the step function, approvals, guardrails, the ledger.

The demo shop is an example app in `agent.demo`; nothing here imports it.
"""

from __future__ import annotations

from .app import AppContext, ApprovalReview, ChatApp, DepsFactory, RunScope, default_limits
from .approvals import decide
from .arguments import InvalidArguments, ToolSchemas, validate_args
from .eventlog import EventLogSink, Publisher, stored_events
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
from .ledger import ToolLedger
from .loader import AppLoadError, load_app
from .records import RunRecords
from .retries import ModelRetries
from .runtime import Runtime, RuntimeOptions, UnknownModel, open_runtime, resolve_model
from .step import run_step
from .texts import Texts
from .tool_failures import ToolFailures

__all__ = (
    "AppContext",
    "AppLoadError",
    "ApprovalReview",
    "ChatApp",
    "DepsFactory",
    "EventLogSink",
    "Guardrail",
    "GuardrailContext",
    "Guardrails",
    "InvalidArguments",
    "MessageRate",
    "ModelRetries",
    "PatternGuardrail",
    "Publisher",
    "RunRecords",
    "RunScope",
    "Runtime",
    "RuntimeOptions",
    "Texts",
    "ToolFailures",
    "ToolLedger",
    "ToolSchemas",
    "UnknownModel",
    "decide",
    "default_guardrails",
    "default_limits",
    "injection_guardrail",
    "leak_guardrail",
    "load_app",
    "open_runtime",
    "resolve_model",
    "run_step",
    "stored_events",
    "validate_args",
)
