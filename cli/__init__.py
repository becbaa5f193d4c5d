"""The `durable-chat` command line: a thin shell over `web/` and `store/`."""

from __future__ import annotations

from .main import build_parser, main

__all__ = ("build_parser", "main")
