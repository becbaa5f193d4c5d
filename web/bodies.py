"""Request bodies: read under a size limit, decoded as JSON, validated by pydantic models.

Every way a body can be wrong has its own answer, and none is a 500: too large (`413
payload_too_large`, counted while reading, so a body without `Content-Length` cannot get
around it), not JSON by its content type (`415 unsupported_media_type`), not UTF-8 or not JSON
(`400 invalid_json`; so is `NaN`, `Infinity` or `-Infinity`, which Python's `json` and pydantic's parser
would read but no JSON encoder writes back), the wrong shape (`422 validation_error`, with pydantic's error list as
`details`), a string holding a NUL or a lone surrogate anywhere (`422 validation_error`, see
`web.text`). A client that hangs up half-way through its body gets nothing and leaves an INFO line
at most (`web.app`). An empty body stands for `{}`: every body field of the API is optional or named in
the 422.
"""

from __future__ import annotations

import json
import math
from typing import TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from pydantic_core import ErrorDetails
from starlette.requests import Request

from .errors import ApiError
from .text import unstorable_in

__all__ = (
    "ApproveBody",
    "MessageBody",
    "NewThreadBody",
    "RejectBody",
    "RenameBody",
    "parse_json",
    "read_body",
    "validation_details",
)

Body = TypeVar("Body", bound=BaseModel)

_DIGITS_AS_ZERO = bytes.maketrans(b"123456789", b"000000000")
_LONG_NUMBER = b"0" * 300


def maybe_not_finite(raw: bytes) -> bool:
    """Whether `raw` may hold a number pydantic's JSON parser reads as infinity: `NaN`, `Infinity`, a
    digit before an exponent, or 300 digits in a row (as `NaN|Infinity|\\d[eE]|\\d{300}` finds).

    Byte searches in C, every digit made a `0` first: the AI SDK resends the whole conversation each
    turn, and that regular expression, tried at every byte, cost more than validating the body.
    """
    if b"NaN" in raw or b"Infinity" in raw:
        return True
    digits = raw.translate(_DIGITS_AS_ZERO)
    return b"0e" in digits or b"0E" in digits or _LONG_NUMBER in digits


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class NewThreadBody(_Strict):
    title: str = Field(default="", max_length=200)


class RenameBody(_Strict):
    title: str = Field(min_length=1, max_length=200)

    @field_validator("title")
    @classmethod
    def _not_blank(cls, title: str) -> str:
        title = " ".join(title.split())
        if not title:
            raise ValueError("the title must not be blank")
        return title


class MessageBody(_Strict):
    content: str = ""
    """The message's text; may be empty when `files` attaches something (a photo alone)."""
    idempotency_key: str | None = Field(default=None, min_length=1, max_length=200)
    files: list[str] = Field(default_factory=list[str], max_length=20)
    """Ids of files of the thread attached to the message."""


class ApproveBody(_Strict):
    override_args: dict[str, object] | None = None


class RejectBody(_Strict):
    reason: str | None = Field(default=None, max_length=2000)


async def read_body(request: Request, model: type[Body], *, max_bytes: int) -> Body:
    """The request's body as `model`.

    Raises:
        ApiError: 413, 415, 400 or 422, as the module docstring says.
    """
    raw = await _read_limited(request, max_bytes)
    if not raw.strip():
        data: object = {}
    else:
        media_type = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
        if media_type != "application/json" and not media_type.endswith("+json"):
            raise ApiError(
                415,
                "unsupported_media_type",
                f"the body must be application/json, not {media_type or 'untyped'!r}",
            )
        # Straight from the bytes (pydantic's parser checks UTF-8 and JSON as strictly as `json.loads`
        # does, and builds no dict): faster than the way below (docs/benchmarks.md). Only a body that passes is taken from here (`tests/test_bodies.py`:
        # the way below reads it alike); anything refused goes the way below, which says what is
        # wrong as it always has. A `\u` escape may spell unstorable text, which only it looks for.
        # Nor one that may hold a non-finite number: that parser reads `NaN`, `Infinity`, and `1e400`
        # as infinity (a body naming them in a string merely goes the way below).
        if b"\\u" not in raw and not maybe_not_finite(raw):
            try:
                return model.model_validate_json(raw)
            except ValidationError:
                pass
        try:
            data = parse_json(raw.decode("utf-8"))
        except UnicodeDecodeError as error:
            raise ApiError(400, "invalid_json", f"the body is not UTF-8: {error.reason}") from error
        except (ValueError, RecursionError) as error:
            # ValueError: `JSONDecodeError`, or an integer past Python's 4,300 digits.
            raise ApiError(400, "invalid_json", f"the body is not valid JSON: {error}") from error
        # Strict UTF-8 and JSON leave one way to spell a NUL or a lone surrogate: a `\u` escape. A
        # body without one (nearly all) skips the walk over every string it holds.
        unstorable = unstorable_in(data) if b"\\u" in raw else None
        if unstorable is not None:
            loc, reason = unstorable
            details: list[dict[str, object]] = [{"loc": loc, "msg": reason, "type": "unstorable_text"}]
            raise ApiError(
                422, "validation_error", f"the request is not valid: {loc}: {reason}", details=details
            )
    try:
        return model.model_validate(data)
    except ValidationError as error:
        raise validation_error(error) from error


def parse_json(text: str) -> object:
    """`text` decoded as JSON, refusing the non-finite numbers (`NaN`, `Infinity`, `-Infinity`).

    Raises:
        ValueError: Not JSON, or holding a non-finite number.
        RecursionError: Nested too deep.
    """
    return json.loads(text, parse_constant=_refuse_constant, parse_float=_finite)


def _refuse_constant(name: str) -> object:
    raise ValueError(f"{name} is not a JSON number")


def _finite(text: str) -> float:
    number = float(text)
    if not math.isfinite(number):
        raise ValueError(f"the number {text[:40]!r} is out of range")
    return number


def validation_error(error: ValidationError) -> ApiError:
    details = validation_details(error.errors(include_url=False, include_context=False, include_input=False))
    summary = "; ".join(f"{d['loc']}: {d['msg']}" for d in details)
    return ApiError(422, "validation_error", f"the request is not valid: {summary}", details=details)


def validation_details(errors: list[ErrorDetails] | list[dict[str, object]]) -> list[dict[str, object]]:
    """Pydantic errors as JSON: a dotted `loc`, `msg` and `type` each."""
    details: list[dict[str, object]] = []
    for error in errors:
        loc = error.get("loc", ())
        parts: list[object] = list(loc) if isinstance(loc, (list, tuple)) else [loc]  # pyright: ignore[reportUnknownArgumentType]
        details.append(
            {
                "loc": ".".join(str(part) for part in parts) or "(body)",
                "msg": str(error.get("msg", "")),
                "type": str(error.get("type", "")),
            }
        )
    return details


async def _read_limited(request: Request, max_bytes: int) -> bytes:
    too_large = ApiError(413, "payload_too_large", f"the body is larger than {max_bytes} bytes")
    declared = request.headers.get("content-length")
    if declared is not None and declared.strip().isdigit() and int(declared) > max_bytes:
        raise too_large
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > max_bytes:
            raise too_large
        chunks.append(chunk)
    return b"".join(chunks)
