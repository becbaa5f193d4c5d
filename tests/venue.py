"""The venue example (`examples/venue`) imported as its folder serves it, for the tests that drive it."""

from __future__ import annotations

import importlib
import sys
from types import ModuleType

from .live_server import REPO_ROOT

__all__ = ("EXAMPLE", "venue")

EXAMPLE = REPO_ROOT / "examples" / "venue"


def venue() -> ModuleType:
    """The example's `venue` module, imported from its folder as `durable-chat serve --app venue:app` does."""
    if str(EXAMPLE) not in sys.path:
        sys.path.insert(0, str(EXAMPLE))
    return importlib.import_module("venue")
