"""Whom the command line acts for when no `--user` is given."""

from __future__ import annotations

__all__ = ("DEFAULT_REVIEWER", "DEFAULT_USER")

DEFAULT_USER = "demo"
"""The user `chat` and `threads` act for, and whom `serve`'s sign-in link signs in, unless told otherwise."""

DEFAULT_REVIEWER = "reviewer"
"""Whom `serve`'s reviewer link signs in, with the app's `reviewer_roles`."""
