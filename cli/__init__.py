"""The `durable-chat` command line: a thin shell over `web/` and `agent/`.

Importing this package imports nothing else of ours: `python -m cli` first makes sure the module path
finds our packages, not a user's module of the same name (see `cli/__main__.py`).
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ("main",)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line and return its exit status (see `cli.main.main`)."""
    from .main import main as run  # deferred: see the module's docstring

    return run(argv)
