"""The agent core: the `ChatApp` seam, the step function, approvals, guardrails, the ledger.

The demo shop is an example app in `agent.demo`; nothing here imports it.

Each name is imported on first use (PEP 562): reading a constant such as `DEFAULT_APP` does not import
pydantic-ai's agent.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .app import AppContext, ApprovalReview, ChatApp, DepsFactory, ReviewPolicy, RunScope, default_limits
    from .approvals import NotDue, decide
    from .arguments import InvalidArguments, ToolSchemas, validate_args
    from .cancellation import Cancellation, cancel, interrupted_messages
    from .delegation import sub_conversation_id
    from .eventlog import EventLogSink, Publisher, stored_events
    from .files import (
        FILE_URL,
        Attachment,
        FileResolver,
        ThreadFiles,
        attachment_of,
        attachments_in,
        file_reference,
    )
    from .guardrails import (
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
    from .handoffs import SAID_BY
    from .ledger import ToolLedger
    from .loader import DEFAULT_APP, OWN_PACKAGES, AppLoadError, load_app
    from .logs import LOG_FORMAT, format_trace_id, install_log_filters
    from .opening import Opened, queue_run
    from .pauses import PauseAtDeferredCalls
    from .records import RunRecords
    from .redaction import secrets_from_environment
    from .regenerate import NothingToRegenerate, last_prompt, without_last_turn
    from .retries import ModelRetries
    from .review import (
        Escalate,
        Review,
        ReviewerRequired,
        expiry_from_json,
        expiry_json,
        expiry_reason,
    )
    from .run_hooks import RunHooks
    from .runtime import Runtime, RuntimeOptions, UnknownModel, open_runtime, resolve_model
    from .step import run_step
    from .texts import Texts
    from .tool_failures import ToolFailures
    from .trace_file import DEFAULT_TRACE_FILES, DEFAULT_TRACE_MAX_BYTES, trace_files
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
    "DEFAULT_TRACE_FILES",
    "DEFAULT_TRACE_MAX_BYTES",
    "FILE_URL",
    "LOG_FORMAT",
    "OWN_PACKAGES",
    "SAID_BY",
    "AppContext",
    "AppLoadError",
    "ApprovalReview",
    "Attachment",
    "Cancellation",
    "ChatApp",
    "DepsFactory",
    "Escalate",
    "EventLogSink",
    "FileResolver",
    "Guardrail",
    "GuardrailContext",
    "Guardrails",
    "InvalidArguments",
    "MessageRate",
    "ModelRetries",
    "NotDue",
    "NothingToRegenerate",
    "Opened",
    "PatternGuardrail",
    "PauseAtDeferredCalls",
    "Publisher",
    "Review",
    "ReviewPolicy",
    "ReviewerRequired",
    "RunHooks",
    "RunRecords",
    "RunSampler",
    "RunScope",
    "Runtime",
    "RuntimeOptions",
    "StreamingGuardrail",
    "TextScanner",
    "Texts",
    "ThreadFiles",
    "ToolFailures",
    "ToolLedger",
    "ToolSchemas",
    "TracingConfig",
    "TracingUnavailable",
    "UnknownModel",
    "attachment_of",
    "attachments_in",
    "cancel",
    "decide",
    "default_guardrails",
    "default_limits",
    "expiry_from_json",
    "expiry_json",
    "expiry_reason",
    "file_reference",
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
    "open_runtime",
    "queue_run",
    "resolve_model",
    "run_step",
    "secrets_from_environment",
    "setup_tracing",
    "stored_events",
    "sub_conversation_id",
    "trace_files",
    "validate_args",
    "without_last_turn",
)

_EXPORTS = {
    "app": (
        "AppContext",
        "ApprovalReview",
        "ChatApp",
        "DepsFactory",
        "ReviewPolicy",
        "RunScope",
        "default_limits",
    ),
    "approvals": ("NotDue", "decide"),
    "review": (
        "Escalate",
        "Review",
        "ReviewerRequired",
        "expiry_from_json",
        "expiry_json",
        "expiry_reason",
    ),
    "arguments": ("InvalidArguments", "ToolSchemas", "validate_args"),
    "cancellation": ("Cancellation", "cancel", "interrupted_messages"),
    "delegation": ("sub_conversation_id",),
    "eventlog": ("EventLogSink", "Publisher", "stored_events"),
    "guardrails": (
        "Guardrail",
        "GuardrailContext",
        "Guardrails",
        "MessageRate",
        "PatternGuardrail",
        "StreamingGuardrail",
        "TextScanner",
        "default_guardrails",
        "first_tripped",
        "injection_guardrail",
        "leak_guardrail",
        "message_window",
    ),
    "files": (
        "FILE_URL",
        "Attachment",
        "FileResolver",
        "ThreadFiles",
        "attachment_of",
        "attachments_in",
        "file_reference",
    ),
    "handoffs": ("SAID_BY",),
    "ledger": ("ToolLedger",),
    "loader": ("DEFAULT_APP", "OWN_PACKAGES", "AppLoadError", "load_app"),
    "logs": ("LOG_FORMAT", "format_trace_id", "install_log_filters"),
    "opening": ("Opened", "queue_run"),
    "pauses": ("PauseAtDeferredCalls",),
    "records": ("RunRecords",),
    "redaction": ("secrets_from_environment",),
    "regenerate": ("NothingToRegenerate", "last_prompt", "without_last_turn"),
    "retries": ("ModelRetries",),
    "run_hooks": ("RunHooks",),
    "runtime": ("Runtime", "RuntimeOptions", "UnknownModel", "open_runtime", "resolve_model"),
    "step": ("run_step",),
    "texts": ("Texts",),
    "tool_failures": ("ToolFailures",),
    "trace_file": ("DEFAULT_TRACE_FILES", "DEFAULT_TRACE_MAX_BYTES", "trace_files"),
    "tracing": (
        "DEFAULT_SAMPLE_RATIO",
        "RunSampler",
        "TracingConfig",
        "TracingUnavailable",
        "instrumentation",
        "setup_tracing",
    ),
}
_MODULE_OF = {name: module for module, names in _EXPORTS.items() for name in names}


def __getattr__(name: str) -> object:
    if name not in _MODULE_OF:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    # The import statement's own path, which `python -X importtime` logs; `importlib.import_module`
    # would leave the module out of the log that start-up is measured with.
    module = __import__(_MODULE_OF[name], globals(), fromlist=(name,), level=1)
    value = globals()[name] = getattr(module, name)
    return value
