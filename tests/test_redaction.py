"""`agent.redaction.redact`: e-mail addresses, card numbers and secrets masked; anything else untouched."""

from __future__ import annotations

import string

from hypothesis import example, given
from hypothesis import strategies as st
from inline_snapshot import snapshot

from agent.redaction import (
    CARD_MASK,
    EMAIL_MASK,
    SECRET_MASK,
    redact,
    secrets_from_environment,
    usable_secrets,
)

# Text with no '@' and no ASCII digit can hold neither an address nor a card number.
plain_text = st.text(st.characters(exclude_characters="@0123456789"), max_size=60)
# Any text at all around what must disappear, with a space on each side so it stands on its own.
any_text = st.text(max_size=40)
secret_values = st.text(string.ascii_letters + string.digits + "-_./+=:", min_size=8, max_size=40).filter(
    lambda s: s.strip() == s
)


@st.composite
def card_numbers(draw: st.DrawFn) -> str:
    """13 to 19 digits, plain or grouped by one space or one dash."""
    digits = draw(st.text("0123456789", min_size=13, max_size=19))
    separator = draw(st.sampled_from(["", " ", "-"]))
    group = draw(st.integers(min_value=3, max_value=6))
    return separator.join(digits[i : i + group] for i in range(0, len(digits), group))


@given(before=any_text, address=st.emails(), after=any_text)
@example(before="mail ", address="alice@example.com", after=".")
@example(before="x@y.z", address="a@b.co", after="")
@example(before="", address="/@A.aR", after="")
def test_an_email_address_in_any_text_disappears(before: str, address: str, after: str) -> None:
    redacted = redact(f"{before} {address} {after}")

    assert address not in redacted
    assert EMAIL_MASK in redacted


@given(before=any_text, card=card_numbers(), after=any_text)
@example(before="card", card="4111 1111 1111 1111", after="exp 12/29")
@example(before="123456", card="4111111111111111", after="7")
def test_a_card_number_in_any_text_disappears(before: str, card: str, after: str) -> None:
    redacted = redact(f"{before} {card} {after}")

    assert card not in redacted
    assert CARD_MASK in redacted


@given(before=any_text, secret=secret_values, after=any_text)
def test_a_configured_secret_in_any_text_disappears(before: str, secret: str, after: str) -> None:
    # Glued to the text on both sides: a secret is masked wherever it occurs.
    redacted = redact(f"{before}{secret}{after}", secrets=[secret])

    assert secret not in redacted
    assert SECRET_MASK in redacted


@given(text=plain_text, numbers=st.lists(st.integers(min_value=0, max_value=10**12 - 1), max_size=4))
def test_text_without_addresses_cards_or_secrets_is_unchanged(text: str, numbers: list[int]) -> None:
    # Numbers of up to 12 digits (ids, amounts, years, phone numbers) are not card numbers, as long
    # as they stand apart: digit groups joined by single spaces or dashes read as one number.
    mixed = ", ".join([text, *map(str, numbers)])

    assert redact(mixed, secrets=["not-in-the-text-[x]", "short"]) == mixed


@given(text=st.text(max_size=80) | st.builds("{} {} {}".format, any_text, st.emails(), card_numbers()))
def test_redacting_twice_changes_nothing_more(text: str) -> None:
    once = redact(text, secrets=["hunter2-hunter2"])

    assert redact(once, secrets=["hunter2-hunter2"]) == once


@given(secrets=st.lists(secret_values, min_size=1, max_size=3), text=any_text)
def test_redacting_twice_changes_nothing_more_with_any_secrets(secrets: list[str], text: str) -> None:
    once = redact(f"{text} {' '.join(secrets)} {text}", secrets)

    assert redact(once, secrets) == once
    assert not any(secret in once for secret in secrets)


def test_redaction_masks_each_kind_and_keeps_ids() -> None:
    text = (
        "refund for bob.smith+shop@mail.example.co.uk, card 4111-1111-1111-1111, key sk-live-abcdef123456; "
        "run 12345678-1234-4234-8234-123456789012, trace 4bf92f3577b34da6a3ce929d0e0e4736, order ORD-5678, "
        "total 99.98, phone +1 555 123 4567"
    )

    assert redact(text, secrets=["sk-live-abcdef123456"]) == snapshot(
        "refund for [email], card [card], key [secret]; run 12345678-1234-4234-8234-123456789012, "
        "trace 4bf92f3577b34da6a3ce929d0e0e4736, order ORD-5678, total 99.98, phone +1 555 123 4567"
    )


def test_an_address_url_encoded_in_a_path_is_masked() -> None:
    assert (
        redact('"GET /api/threads/bob%40example.com?x=1 HTTP/1.1" 404')
        == '"GET /api/threads/[email]?x=1 HTTP/1.1" 404'
    )


def test_a_secret_holding_an_address_is_masked_whole() -> None:
    assert redact("token=admin@example.com:pw-123", secrets=["admin@example.com:pw-123"]) == "token=[secret]"


def test_short_and_bracketed_secrets_are_ignored_longest_first() -> None:
    assert usable_secrets(["abc", "[redacted]", "long-secret-1", "long-secret-12", "long-secret-1"]) == (
        "long-secret-12",
        "long-secret-1",
    )


def test_secrets_come_from_credential_variables_only() -> None:
    environ = {
        "OPENAI_API_KEY": "sk-openai-0123456789",
        "DURABLE_CHAT_SECRET": "server-signing-secret",
        "GITHUB_TOKEN": "ghp_0123456789abcdef",
        "PGPASSWORD": "too-short"[:5],
        "DB_PASSWORD": "correct-horse-battery",
        "HOME": "/home/someone-long",
        "TOKENIZERS_PARALLELISM": "false-but-long",
    }

    assert sorted(secrets_from_environment(environ)) == snapshot(
        ["correct-horse-battery", "ghp_0123456789abcdef", "server-signing-secret", "sk-openai-0123456789"]
    )
