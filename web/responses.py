"""`JsonResponse`: a JSON answer that can always be written, whatever a stored value holds.

Starlette's `JSONResponse` raises on a value JSON cannot spell (a `NaN` or infinite float, text with
a lone surrogate), and the read endpoints would answer 500 for good on a thread that stored one
(bodies refuse them now, `web.bodies`; a row written before, or by a tool, may still hold one).
Here such a value is written as the nearest thing JSON has: `null` for a non-finite number, U+FFFD
for a lone surrogate, the text of anything else; the rest of the answer is unchanged.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from typing import cast

from starlette.responses import JSONResponse

__all__ = ("JsonResponse", "writable")

logger = logging.getLogger(__name__)


class JsonResponse(JSONResponse):
    """`JSONResponse`, writing what JSON cannot hold as the module says rather than failing."""

    def render(self, content: object) -> bytes:
        try:
            return super().render(content)
        except (ValueError, TypeError, UnicodeEncodeError) as error:
            logger.warning("an answer held a value JSON cannot spell, written as its nearest: %r", error)
            return super().render(writable(content))


def writable(value: object) -> object:
    """`value` with what JSON cannot spell replaced (see the module's notes)."""
    match value:
        case bool() | None:
            return value
        case int():
            # Past Python's 4,300 digits an integer has no text at all.
            return value if value.bit_length() < 14_000 else None
        case float():
            return value if math.isfinite(value) else None
        case str():
            return "".join("\ufffd" if "\ud800" <= char <= "\udfff" else char for char in value)
        case Mapping():
            items = cast("Mapping[object, object]", value).items()
            return {str(writable(key)): writable(item) for key, item in items}
        case list() | tuple():
            return [writable(item) for item in cast("list[object]", value)]
        case _:
            return writable(str(value))
