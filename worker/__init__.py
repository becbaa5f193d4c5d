"""The worker: what drives runs in the background and carries their events between processes.

It knows no HTTP: `web/` serves on top of it, and any other shell (the command line, a test) can drive
runs with it. `Runner` drives runs and keeps this worker's leases; `Broker` hands a thread's stored
events to its live followers in this process; `Relay` reads the events other processes store into it;
`holding_leases` keeps this process's leases while a shell drives runs itself (the terminal chat);
`Periodic` repeats background work (deadlines, webhooks) in a task of its own.

Each name is imported on first use (PEP 562), as in `agent` and `web`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .broker import DEFAULT_BUFFER, Broker, SubscriberDropped, Subscription
    from .deadlines import Deadlines
    from .leases import holding_leases
    from .loops import Periodic
    from .relay import Relay
    from .runner import Runner

__all__ = (
    "DEFAULT_BUFFER",
    "Broker",
    "Deadlines",
    "Periodic",
    "Relay",
    "Runner",
    "SubscriberDropped",
    "Subscription",
    "holding_leases",
)

_EXPORTS = {
    "broker": ("DEFAULT_BUFFER", "Broker", "SubscriberDropped", "Subscription"),
    "deadlines": ("Deadlines",),
    "leases": ("holding_leases",),
    "loops": ("Periodic",),
    "relay": ("Relay",),
    "runner": ("Runner",),
}
_MODULE_OF = {name: module for module, names in _EXPORTS.items() for name in names}


def __getattr__(name: str) -> object:
    if name not in _MODULE_OF:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    # The import statement's own path, which `python -X importtime` logs (see `agent/__init__.py`).
    module = __import__(_MODULE_OF[name], globals(), fromlist=(name,), level=1)
    value = globals()[name] = getattr(module, name)
    return value
