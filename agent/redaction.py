"""Redaction of personal data and secrets from what operators see: log lines and trace spans.

One function, `redact`, is the rule; the logging filter (`agent.logs`) and the span exporter
(`agent.tracing`) apply it. The conversation the user sees is never redacted. Deliberate choices:

- **Secrets first**, then e-mail addresses, then card numbers: a secret that contains an address
  or digits is masked whole, not partly.
- **E-mail addresses** are `local@domain.tld` with the characters RFC 5322 allows unquoted in the
  local part; a dotted host after `@` is enough, so `user@host.lan` and the `user@host` of a URL
  are masked too, and so is an address URL-encoded in a path (`user%40host.com`, as an access log
  shows it). Quoted local parts and IP-literal domains are not recognized.
- **Card-like numbers** are 13 to 19 digits, optionally grouped by single spaces or dashes, that
  stand on their own: not glued to letters, digits, `_` or `-` (so ids like UUIDs and trace ids,
  which mix digits and hex letters, are never masked). There is **no Luhn check**: a mistyped card
  number is still personal data, and an occasional long order number masked in a log costs little.
- **Configured secrets** are masked wherever they occur, case-sensitively. A secret shorter than
  `MIN_SECRET_LENGTH` is ignored (it would mask ordinary words), and so is one holding `[` or `]`
  (it could then match across a mask, and redacting twice would not give the same text).
- The masks (`[email]`, `[card]`, `[secret]`) match none of the rules, so `redact` is idempotent.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from functools import lru_cache

__all__ = (
    "CARD_MASK",
    "EMAIL_MASK",
    "MIN_SECRET_LENGTH",
    "SECRET_MASK",
    "redact",
    "secrets_from_environment",
    "usable_secrets",
)

EMAIL_MASK = "[email]"
CARD_MASK = "[card]"
SECRET_MASK = "[secret]"
MIN_SECRET_LENGTH = 8

# The local part takes RFC 5322's unquoted characters but `/`, `=`, `?` and `&`, which are rare in
# addresses and common right before one in URLs (`/threads/bob@x.com`, `?email=bob@x.com`): the
# address is masked, not the path or the query before it. It may be empty, so an address whose
# local part is made of those characters alone still loses its `@domain` and is gone.
_EMAIL = re.compile(r"[A-Za-z0-9!#$%'*+^_`{|}~.-]*(?:@|%40)[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)+")
_CARD = re.compile(r"(?<![0-9A-Za-z_-])[0-9](?:[ -]?[0-9]){12,18}(?![0-9A-Za-z_-])")

# Names of environment variables that hold credentials: provider API keys and the like.
_SECRET_VARIABLE = re.compile(r"(?:^|_)(?:API_KEY|SECRET|TOKEN|PASSWORD)$")


def redact(text: str, secrets: Iterable[str] = ()) -> str:
    """`text` with configured secrets, e-mail addresses and card-like numbers masked.

    Args:
        text: Any text bound for a log line or a span.
        secrets: Values to mask wherever they occur; see `usable_secrets` for which count.
    """
    pattern = _secrets_pattern(usable_secrets(secrets))
    if pattern is not None:
        text = pattern.sub(SECRET_MASK, text)
    if "@" in text or "%40" in text:
        text = _EMAIL.sub(EMAIL_MASK, text)
    return _CARD.sub(CARD_MASK, text)


def usable_secrets(secrets: Iterable[str]) -> tuple[str, ...]:
    """The secrets `redact` masks: distinct, long enough, free of `[` and `]`, longest first."""
    kept = {s for s in secrets if len(s) >= MIN_SECRET_LENGTH and "[" not in s and "]" not in s}
    return tuple(sorted(kept, key=lambda s: (-len(s), s)))


def secrets_from_environment(environ: Mapping[str, str]) -> tuple[str, ...]:
    """Credentials found in `environ`: variables named `*_API_KEY`, `*_SECRET`, `*_TOKEN`, `*_PASSWORD`."""
    return usable_secrets(value for name, value in environ.items() if _SECRET_VARIABLE.search(name.upper()))


@lru_cache(maxsize=16)
def _secrets_pattern(secrets: tuple[str, ...]) -> re.Pattern[str] | None:
    # Longest first, so a secret that contains another is masked whole.
    return re.compile("|".join(map(re.escape, secrets))) if secrets else None
