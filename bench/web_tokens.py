"""`web/tokens.py` loaded on its own, without importing the `web` package (and so the whole server).

The baseline server and the load generator only sign and check tokens; loading the module from
its file keeps them independent of the rest of the tree (and of edits to it during a run).
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

__all__ = ("InvalidToken", "issue_token", "verify_token")


def _load() -> ModuleType:
    path = Path(__file__).resolve().parent.parent / "web" / "tokens.py"
    spec = importlib.util.spec_from_file_location("_bench_web_tokens", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


_tokens = _load()
InvalidToken: type[Exception] = _tokens.InvalidToken
issue_token = _tokens.issue_token
verify_token = _tokens.verify_token
