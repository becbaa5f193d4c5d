"""`read_body`'s two ways agree: a body taken straight from its bytes is what `json.loads` and validation make.

`read_body` validates a body with `model_validate_json` and falls back to `json.loads` and
`model_validate` (which find what to answer) for anything refused. The fallback's answers are
tested in `tests/test_api_input.py` and `tests/test_api_fuzz.py`; here, that whatever the first way
accepts, the second accepts too, the same.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import BaseModel, ValidationError

from web.ai_sdk.endpoints import ChatBody
from web.bodies import ApproveBody, MessageBody, RenameBody, maybe_not_finite

TEXT = st.text(max_size=8) | st.sampled_from(["", "x", "\x00", "\u2028", "\ufeff", "user", "text"])
JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | TEXT,
    lambda children: st.lists(children, max_size=3) | st.dictionaries(TEXT, children, max_size=3),
    max_leaves=8,
)
APPROVAL = st.fixed_dictionaries(
    {"id": TEXT | JSON},
    optional={"approved": st.booleans() | JSON, "reason": TEXT | JSON, "isAutomatic": JSON},
)
PART = st.fixed_dictionaries(
    {"type": st.sampled_from(["text", "step-start", "tool-x"]) | TEXT},
    optional={
        "text": TEXT | JSON,
        "state": st.just("approval-responded") | JSON,
        "approval": APPROVAL | JSON,
    },
)
MESSAGE = st.fixed_dictionaries(
    {
        "id": TEXT | JSON,
        "role": st.sampled_from(["user", "assistant", "system"]) | JSON,
        "parts": st.lists(PART, max_size=3) | JSON,
    },
    optional={"metadata": JSON},
)
CHAT = st.fixed_dictionaries(
    {"id": TEXT | JSON, "messages": st.lists(MESSAGE, max_size=3) | JSON},
    optional={
        "trigger": st.sampled_from(["submit-message", "regenerate-message"]) | JSON,
        "messageId": TEXT | JSON,
        "extra": JSON,
    },
)
NATIVE = st.fixed_dictionaries(
    {},
    optional={
        "content": TEXT | JSON,
        "idempotency_key": TEXT | JSON,
        "title": TEXT | JSON,
        "override_args": JSON,
        "x": JSON,
    },
)


def agree(model: type[BaseModel], value: object, ensure_ascii: bool) -> None:
    text = json.dumps(value, ensure_ascii=ensure_ascii)
    try:
        raw = text.encode("utf-8")
    except UnicodeEncodeError:
        # A lone surrogate written raw is not UTF-8: refused by both ways.
        raw = text.encode("utf-8", "surrogatepass")
        with pytest.raises(ValidationError):
            model.model_validate_json(raw)
        with pytest.raises(UnicodeDecodeError):
            raw.decode("utf-8")
        return
    # Both ways refuse the same bodies and make the same of the others; `read_body` takes a body
    # holding a `\u` escape the longer way only, but the two agree on those too.
    assert _read(model, lambda: model.model_validate_json(raw)) == _read(
        model, lambda: model.model_validate(json.loads(raw.decode("utf-8")))
    )


def _read(model: type[BaseModel], way: Callable[[], BaseModel]) -> BaseModel | None:
    """What `way` makes of a body, `None` if it refuses it."""
    try:
        return way()
    except ValidationError:
        return None


@given(value=CHAT | JSON, ensure_ascii=st.booleans())
def test_the_ai_sdk_body_is_read_alike_both_ways(value: object, ensure_ascii: bool) -> None:
    agree(ChatBody, value, ensure_ascii)


@given(value=NATIVE, ensure_ascii=st.booleans())
def test_the_native_bodies_are_read_alike_both_ways(value: object, ensure_ascii: bool) -> None:
    for model in (MessageBody, RenameBody, ApproveBody):
        agree(model, value, ensure_ascii)


_NOT_FINITE = re.compile(rb"NaN|Infinity|\d[eE]|\d{300}")
"""What `maybe_not_finite` finds, as a regular expression (slow: tried at every byte)."""


@given(
    st.lists(
        st.sampled_from(
            [b"NaN", b"Infinity", b"Na", b"Inf", b"e", b"E", b"0", b"7", b"9" * 299, b" ", b"\\u"]
        )
        | st.binary(max_size=6),
        max_size=12,
    )
)
def test_a_body_goes_the_slow_way_when_the_regular_expression_says_so(pieces: list[bytes]) -> None:
    raw = b"".join(pieces)
    assert maybe_not_finite(raw) == (_NOT_FINITE.search(raw) is not None)
