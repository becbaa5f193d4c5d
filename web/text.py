"""Text both databases store alike: every string that enters the API is checked here.

PostgreSQL refuses a NUL character (U+0000) in text and JSON, and no database can encode a lone
surrogate (U+D800 to U+DFFF, which JSON's `\\ud800` escape produces) as UTF-8; SQLite would store
the first and fail on the second. So both are refused where text comes in (bodies, cursors, user
names from tokens), and the same input gets the same answer on either database.
"""

from __future__ import annotations

import re
from typing import cast

__all__ = ("unstorable", "unstorable_in")

_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


def unstorable(text: str) -> str | None:
    """Why `text` cannot be stored, or `None` when it can."""
    found = _UNSTORABLE.search(text)
    if found is None:
        return None
    if found.group() == "\x00":
        return "holds a NUL character (U+0000), which cannot be stored"
    return f"holds a lone surrogate (U+{ord(found.group()):04X}), which is not valid Unicode text"


def unstorable_in(value: object) -> tuple[str, str] | None:
    """The dotted location and the reason of the first unstorable string (key or value) in decoded JSON."""
    # Iterative: a body nested as deep as the JSON parser allows must not exhaust the stack here.
    pending: list[tuple[tuple[str, ...], object]] = [((), value)]
    while pending:
        loc, item = pending.pop()
        match item:
            case str():
                reason = unstorable(item)
                if reason is not None:
                    return ".".join(loc) or "(body)", reason
            case dict():
                # JSON decodes to dicts with string keys and to lists: no other element types.
                for key, child in cast("dict[object, object]", item).items():
                    text = str(key)
                    reason = unstorable(text)
                    if reason is not None:
                        return ".".join((*loc, repr(text))), f"a key {reason}"
                    pending.append(((*loc, text), child))
            case list():
                pending.extend(((*loc, str(i)), child) for i, child in enumerate(cast("list[object]", item)))
            case _:
                pass
    return None
