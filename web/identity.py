"""JWTs from the deployment's identity provider, in place of the built-in tokens.

The algorithm is pinned by the configuration, never chosen by the token: HS256 with a shared
secret, or RS256/ES256 with the provider's keys from its JWKS URL (`web.jwks`). A token must carry
`exp` and the configured audience (and issuer, when one is configured); `nbf` is honoured; the user
is the configured claim (`sub` by default). Checking is PyJWT's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

import jwt
from starlette.requests import Request

from .auth import Principal, Verifier, bearer_token, checked_roles, checked_user, unauthorized
from .errors import ApiError
from .jwks import KeySet, KeySetUnavailable

__all__ = ("JWT_ALGORITHMS", "JwtAlgorithm", "JwtSettings", "jwt_tokens")

JwtAlgorithm = Literal["HS256", "RS256", "ES256"]
JWT_ALGORITHMS: tuple[JwtAlgorithm, ...] = ("HS256", "RS256", "ES256")

_LEEWAY_SECONDS = 30
"""Clock skew allowed between the provider and this server, on `exp` and `nbf`."""


@dataclass(frozen=True, kw_only=True)
class JwtSettings:
    """How the identity provider's tokens are checked (`DURABLE_CHAT_JWT_*`, see `web.settings`)."""

    algorithm: JwtAlgorithm
    audience: str
    """The `aud` a token must name: this service's identifier at the provider."""
    issuer: str | None = None
    """The `iss` a token must name, when set."""
    secret: str | None = field(default=None, repr=False)
    """The HS256 key shared with the provider; `None` with `jwks_url`."""
    jwks_url: str | None = None
    """Where the provider publishes its RS256/ES256 public keys; `None` with `secret`."""
    user_claim: str = "sub"
    """The claim naming the user."""
    roles_claim: str = "roles"
    """The claim giving the user's review roles: a list of strings or one space-separated string."""

    def __post_init__(self) -> None:
        if (self.secret is None) == (self.jwks_url is None):
            raise ValueError("JWTs are checked with a shared secret or a JWKS URL: exactly one of them")
        if (self.secret is None) != (self.algorithm != "HS256"):
            raise ValueError(
                f"{self.algorithm} goes with {'a secret' if self.algorithm == 'HS256' else 'a JWKS URL'}"
            )


def jwt_tokens(settings: JwtSettings, *, keys: KeySet | None = None) -> Verifier:
    """Verifies `Authorization: Bearer <JWT>`; `keys` overrides the key set built from `jwks_url`."""
    if keys is None and settings.jwks_url is not None:
        keys = KeySet(settings.jwks_url, algorithm=settings.algorithm)
    required = ["exp", "aud", settings.user_claim, *(["iss"] if settings.issuer else [])]

    async def verify(request: Request) -> Principal:
        token = bearer_token(request)
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError as error:
            raise unauthorized("invalid_token", "the bearer token is not a JWT") from error
        algorithm: object = header.get("alg")
        if algorithm != settings.algorithm:
            raise unauthorized(
                "invalid_token",
                f"the token is signed with {str(algorithm)[:20]!r}; this server accepts {settings.algorithm} only",
            )
        key: str | jwt.PyJWK = (
            await _provider_key(keys, header.get("kid")) if keys is not None else str(settings.secret)
        )
        try:
            claims = jwt.decode(
                token,
                key,
                algorithms=[settings.algorithm],
                audience=settings.audience,
                issuer=settings.issuer,
                leeway=_LEEWAY_SECONDS,
                options={"require": required},
            )
        except jwt.ExpiredSignatureError as error:
            raise unauthorized("token_expired", "the token has expired; sign in again") from error
        except jwt.ImmatureSignatureError as error:
            raise unauthorized("invalid_token", "the token is not valid yet (nbf or iat)") from error
        except jwt.InvalidAudienceError as error:
            raise unauthorized("invalid_token", "the token is meant for another audience") from error
        except jwt.InvalidIssuerError as error:
            raise unauthorized("invalid_token", "the token comes from another issuer") from error
        except jwt.MissingRequiredClaimError as error:
            raise unauthorized("invalid_token", f"the token has no {error.claim!r} claim") from error
        except jwt.PyJWTError as error:
            raise unauthorized("invalid_token", "the token's signature or claims are not valid") from error
        user = checked_user(
            claims.get(settings.user_claim), source=f"the token's {settings.user_claim!r} claim"
        )
        return Principal(user, checked_roles(claims.get(settings.roles_claim), source=settings.roles_claim))

    return verify


async def _provider_key(keys: KeySet, kid: object) -> jwt.PyJWK:
    if kid is not None and not isinstance(kid, str):
        raise unauthorized("invalid_token", "the token's key id (kid) is not a string")
    try:
        key = await keys.key(kid)
    except KeySetUnavailable as error:
        raise ApiError(
            503,
            "identity_provider_unavailable",
            "the identity provider's keys cannot be fetched; try again",
            headers={"Retry-After": str(math.ceil(error.retry_after))},
        ) from error
    if key is None:
        raise unauthorized(
            "invalid_token", "the token is signed with a key the identity provider does not list"
        )
    return key
