"""The agent core: the `ChatApp` seam, the step function, approvals, guardrails, the ledger.

The demo shop is an example app in `agent.demo`; nothing here imports it.
"""

from __future__ import annotations

from .app import AppContext, ApprovalReview, ChatApp, DepsFactory, RunScope, default_limits
from .approvals import decide
from .arguments import InvalidArguments, ToolSchemas, validate_args
from .cancellation import Cancellation, cancel, interrupted_messages
from .eventlog import EventLogSink, Publisher, new_event, opening_events, opening_stored, stored_events
from .guardrails import (
    HIDE_BLOCKED_TURNS,
    Guardrail,
    GuardrailContext,
    Guardrails,
    MessageRate,
    PatternGuardrail,
    StreamingGuardrail,
    TextScanner,
    default_guardrails,
    first_tripped,
    injection_guardrail,
    leak_guardrail,
    message_window,
)
from .ledger import ToolLedger
from .loader import DEFAULT_APP, OWN_PACKAGES, AppLoadError, load_app
from .logs import LOG_FORMAT, format_trace_id, install_log_filters
from .records import RunRecords
from .redaction import secrets_from_environment
from .regenerate import NothingToRegenerate, last_prompt, without_last_turn
from .retries import ModelRetries
from .run_hooks import RunHooks
from .runtime import Runtime, RuntimeOptions, UnknownModel, open_runtime, resolve_model
from .step import EVENT_BLOCK, run_step, start_run_span
from .texts import Texts
from .tool_failures import ToolFailures
from .tracing import (
    DEFAULT_SAMPLE_RATIO,
    RunSampler,
    TracingConfig,
    TracingUnavailable,
    instrumentation,
    setup_tracing,
)

__all__ = (
    "DEFAULT_APP",
    "DEFAULT_SAMPLE_RATIO",
    "EVENT_BLOCK",
    "HIDE_BLOCKED_TURNS",
    "LOG_FORMAT",
    "OWN_PACKAGES",
    "AppContext",
    "AppLoadError",
    "ApprovalReview",
    "Cancellation",
    "ChatApp",
    "DepsFactory",
    "EventLogSink",
    "Guardrail",
    "GuardrailContext",
    "Guardrails",
    "InvalidArguments",
    "MessageRate",
    "ModelRetries",
    "NothingToRegenerate",
    "PatternGuardrail",
    "Publisher",
    "RunHooks",
    "RunRecords",
    "RunSampler",
    "RunScope",
    "Runtime",
    "RuntimeOptions",
    "StreamingGuardrail",
    "TextScanner",
    "Texts",
    "ToolFailures",
    "ToolLedger",
    "ToolSchemas",
    "TracingConfig",
    "TracingUnavailable",
    "UnknownModel",
    "cancel",
    "decide",
    "default_guardrails",
    "default_limits",
    "first_tripped",
    "format_trace_id",
    "injection_guardrail",
    "install_log_filters",
    "instrumentation",
    "interrupted_messages",
    "last_prompt",
    "leak_guardrail",
    "load_app",
    "message_window",
    "new_event",
    "open_runtime",
    "opening_events",
    "opening_stored",
    "resolve_model",
    "run_step",
    "secrets_from_environment",
    "setup_tracing",
    "start_run_span",
    "stored_events",
    "validate_args",
    "without_last_turn",
)
