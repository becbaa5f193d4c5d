"""Bearer tokens: issued, verified, and refused when malformed, forged or expired."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from web.tokens import InvalidToken, issue_token, verify_token

SECRET = "s3cret"


def test_a_token_names_its_user() -> None:
    token = issue_token(SECRET, "alice", ttl_seconds=60, now=1000)
    claims = verify_token(SECRET, token, now=1001)
    assert (claims.user_id, claims.expires_at) == ("alice", 1060)


@pytest.mark.parametrize(
    ("token", "code"),
    [
        ("", "invalid_token"),
        ("garbage", "invalid_token"),
        ("v1.YWxpY2U.99999999999.AAAA", "invalid_token"),
        ("v2.YWxpY2U.99999999999.AAAA", "invalid_token"),
        ("v1.YWxpY2U.notanumber.AAAA", "invalid_token"),
    ],
)
def test_malformed_or_forged_tokens_are_refused(token: str, code: str) -> None:
    with pytest.raises(InvalidToken) as raised:
        verify_token(SECRET, token)
    assert raised.value.code == code


def test_a_token_signed_with_another_secret_is_forged() -> None:
    with pytest.raises(InvalidToken) as raised:
        verify_token(SECRET, issue_token("other", "alice"))
    assert raised.value.code == "invalid_token"


def test_a_token_for_another_user_cannot_be_made_by_editing_one() -> None:
    version, _, expiry, signature = issue_token(SECRET, "alice").split(".")
    with pytest.raises(InvalidToken):
        verify_token(SECRET, f"{version}.Ym9i.{expiry}.{signature}")


def test_an_expired_token_is_refused() -> None:
    token = issue_token(SECRET, "alice", ttl_seconds=60, now=1000)
    with pytest.raises(InvalidToken) as raised:
        verify_token(SECRET, token, now=1060)
    assert raised.value.code == "token_expired"


@given(st.text(min_size=1, max_size=80).filter(lambda u: all(ord(c) >= 32 for c in u)))
def test_any_printable_user_round_trips(user: str) -> None:
    assert verify_token(SECRET, issue_token(SECRET, user)).user_id == user


@given(st.text(max_size=120))
def test_random_strings_are_never_accepted(token: str) -> None:
    with pytest.raises(InvalidToken):
        verify_token(SECRET, token)
