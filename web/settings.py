"""The server's configuration: CLI flags, then environment variables, then defaults."""

from __future__ import annotations

import os
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from agent import DEFAULT_APP, secrets_from_environment

from .identity import JWT_ALGORITHMS, JwtAlgorithm, JwtSettings
from .media import DEFAULT_MEDIA_TYPES

if TYPE_CHECKING:
    # Imported where they are built: `durable-chat token` and `migrate` read the settings without
    # importing pydantic-ai's agent, OpenTelemetry's SDK or (for `token`) SQLAlchemy.
    from agent import RuntimeOptions, TracingConfig
    from store import ConnectionOptions, Worker

__all__ = ("ENV_PREFIX", "Settings", "SettingsError")

ENV_PREFIX = "DURABLE_CHAT_"
_SECRET_FILE = "secret"
_DATABASE_FILE = "durable-chat.db"
_TRACE_FILE = "traces.jsonl"
_OFF = "off"
_DEFAULT_HOST = "127.0.0.1"
_DEFAULT_PORT = 8000
_MB = 1024 * 1024


class SettingsError(Exception):
    """The configuration cannot be resolved, e.g. the data directory is not writable."""


@dataclass(frozen=True, kw_only=True)
class Settings:
    """Everything the server and the CLI are configured with, resolved once at start."""

    database_url: str
    """SQLAlchemy URL of the database, `sqlite+aiosqlite:///…` or `postgresql+asyncpg://…`."""
    app: str = DEFAULT_APP
    """The app to serve, `MODULE:ATTR` (`--app`, `DURABLE_CHAT_APP`); the demo shop by default."""
    model: str | None = None
    """Overrides the app agent's model (`--model`, `DURABLE_CHAT_MODEL`): a model the app names
    (the shop's `demo`) or any pydantic-ai model string, e.g. `openai:gpt-4o`; `None` keeps the agent's."""
    secret: str = field(repr=False)
    """Key that signs user tokens; never logged."""
    host: str = _DEFAULT_HOST
    port: int = _DEFAULT_PORT
    data_dir: Path = Path("data")
    """Where the default SQLite database and the generated secret live."""
    max_body_bytes: int = 64 * 1024
    """The largest request body the API reads (`413 payload_too_large` beyond it)."""
    max_message_chars: int = 8000
    """The longest user message accepted (`422 validation_error` beyond it)."""
    rate_limit_burst: float = 120.0
    """Per-user token bucket on writes: how many requests may come at once..."""
    rate_limit_per_second: float = 10.0
    """...and how fast the bucket refills (`DURABLE_CHAT_RATE_LIMIT_BURST` / `_PER_SECOND`)."""
    messages_per_minute: int = 30
    """Per-user message rate the input guardrail allows, across threads and processes
    (`DURABLE_CHAT_MESSAGES_PER_MINUTE`); beyond it a message is answered as `blocked`."""
    sse_ping_seconds: float = 15.0
    """How often an event stream sends a keep-alive comment (`DURABLE_CHAT_SSE_PING_SECONDS`), so
    proxies and load balancers do not close an idle one."""
    sse_poll_seconds: float = 5.0
    """How often an idle event stream also reads the log, for events written by other processes."""
    shutdown_timeout_seconds: float = 10.0
    """The bound on a graceful shutdown, from SIGTERM to the process's exit
    (`DURABLE_CHAT_SHUTDOWN_SECONDS`): a quarter for open connections to end, a quarter for running
    steps to reach a checkpoint and another for late ones to stop, the rest to close; past it the
    process exits anyway (`cli.server`)."""
    tracing: TracingConfig = field(default_factory=lambda: _no_tracing())
    """Where spans go (`DURABLE_CHAT_TRACE_FILE`, rotated past `_TRACE_MAX_MB` keeping `_TRACE_FILES`
    earlier files; `_OTLP_ENDPOINT`), the share of runs traced in
    full (`DURABLE_CHAT_TRACE_SAMPLE`, 0.1), whether store operations get spans
    (`DURABLE_CHAT_TRACE_STORE=1`), whether they hold content (`DURABLE_CHAT_TRACE_CONTENT=1`),
    and the secrets redacted from spans and logs."""
    sse_notified_poll_seconds: float = 60.0
    """On PostgreSQL, where other processes' events arrive by notification, how often an idle
    event stream still reads the log (a safety net)."""
    statement_timeout_seconds: float | None = 30.0
    """PostgreSQL cancels a statement running longer (`DURABLE_CHAT_STATEMENT_TIMEOUT`, 0: none)."""
    lock_timeout_seconds: float | None = 10.0
    """PostgreSQL fails a statement waiting longer for a lock (`DURABLE_CHAT_LOCK_TIMEOUT`, 0: none)."""
    idle_in_transaction_timeout_seconds: float | None = 60.0
    """PostgreSQL ends a session idle in a transaction longer (`…_IDLE_IN_TRANSACTION_TIMEOUT`, 0: none)."""
    pool_size: int = 30
    """Connections each of the process's two pools keeps (`DURABLE_CHAT_POOL_SIZE`).

    Enough for a worker's runs and its requests: a pool that keeps fewer than the load holds at
    once opens a connection, and closes it on return, time after time, which costs the server
    CPU and the turns time (`python -m bench.pool`; figures in `docs/benchmarks.md`)."""
    pool_max_overflow: int = 0
    """Connections each pool may open beyond `pool_size` under load (`DURABLE_CHAT_POOL_MAX_OVERFLOW`)."""
    pool_pre_ping: bool = False
    """Test pooled connections before use (`DURABLE_CHAT_POOL_PRE_PING=1`), so that no operation
    meets a connection a database restart killed. Off by default: it makes every operation about
    half as slow again, while without it only the first operation on each pool after a restart
    fails (a 503 to retry; a run waits and retries), and the pool then starts afresh."""
    transaction_pooler: bool = False
    """PostgreSQL is reached through a transaction-mode pooler such as pgbouncer
    (`DURABLE_CHAT_TRANSACTION_POOLER=1`): no prepared-statement caches, no session settings."""
    listen_url: str | None = None
    """A direct PostgreSQL URL for the event listener when `database_url` goes through a
    transaction-mode pooler (`DURABLE_CHAT_LISTEN_URL`); `LISTEN` needs a session."""
    lease_seconds: float = 30.0
    """How long a worker's claim on a run holds without a heartbeat: how soon a dead worker's runs
    are taken over (`DURABLE_CHAT_LEASE_SECONDS`)."""
    heartbeat_seconds: float = 10.0
    """How often a worker renews its leases; shorter than the lease (`DURABLE_CHAT_HEARTBEAT_SECONDS`)."""
    sweep_seconds: float = 5.0
    """How often a worker looks for runs nobody drives (`DURABLE_CHAT_SWEEP_SECONDS`)."""
    event_replay_seconds: float = 3600.0
    """How long a finished run keeps its text deltas in the event log (`DURABLE_CHAT_EVENT_REPLAY_SECONDS`,
    0: for as long as the thread lives); its `text_done` events hold the text whole (`store.compaction`)."""
    deadline_poll_seconds: float = 1.0
    """How often a worker enforces the deadlines of held calls (`DURABLE_CHAT_DEADLINE_POLL_SECONDS`)."""
    max_runs: int = 64
    """Runs one worker drives at once (`DURABLE_CHAT_MAX_RUNS`); more wait for a slot, queued in the
    database, where another worker may take them. A run waiting on its model uses no CPU and no
    connection, and holds one only while it reads or writes: the limit bounds memory and how many
    runs share the process's pools, not throughput (16 before: with models that answer in
    seconds, a worker served at most 16 conversations at a time)."""
    max_streams_per_user: int = 20
    """Event streams one user may hold open at once in this process (`DURABLE_CHAT_MAX_STREAMS_PER_USER`);
    one more is `429 too_many_streams`."""
    max_file_bytes: int = 20 * _MB
    """The largest file an upload may carry (`DURABLE_CHAT_MAX_FILE_MB`, 20); `413 file_too_large` beyond it."""
    file_quota_bytes: int = 500 * _MB
    """How much a user's files may take together, identical ones counted once (`DURABLE_CHAT_FILE_QUOTA_MB`,
    500); `413 quota_exceeded` beyond it."""
    file_types: frozenset[str] = DEFAULT_MEDIA_TYPES
    """The media types an upload may have (`DURABLE_CHAT_FILE_TYPES`, comma-separated), sniffed from its bytes."""
    files_url: str | None = None
    """Where files' bytes are kept (`DURABLE_CHAT_FILES_URL`): the database by default, or an object store
    (`s3://bucket/prefix`, `gs://…`, `az://…`, `file:///directory`)."""
    jwt: JwtSettings | None = None
    """The identity provider whose JWTs replace the built-in tokens (`DURABLE_CHAT_JWT_*`); `None`:
    the built-in tokens signed with `secret`."""
    webhook_urls: tuple[str, ...] = ()
    """Where review events are POSTed (`DURABLE_CHAT_WEBHOOK_URL`, comma-separated); none by default."""
    webhook_secret: str | None = field(default=None, repr=False)
    """The Standard Webhooks signing secret, `whsec_…` (`DURABLE_CHAT_WEBHOOK_SECRET`)."""

    def connection_options(self) -> ConnectionOptions:
        """How the server's PostgreSQL connections are pooled and configured."""
        from store import ConnectionOptions

        return ConnectionOptions(
            pool_size=self.pool_size,
            max_overflow=self.pool_max_overflow,
            pre_ping=self.pool_pre_ping,
            statement_timeout=self.statement_timeout_seconds,
            lock_timeout=self.lock_timeout_seconds,
            idle_in_transaction_timeout=self.idle_in_transaction_timeout_seconds,
            transaction_pooler=self.transaction_pooler,
        )

    def runtime_options(self, worker: Worker | None = None) -> RuntimeOptions:
        """How the app runs here: its model, the default guardrails' rate, tracing, connections."""
        from agent import RuntimeOptions

        return RuntimeOptions(
            model=self.model,
            messages_per_minute=self.messages_per_minute,
            trace_content=self.tracing.include_content,
            trace_agent=self.tracing.exports,
            connection=self.connection_options(),
            worker=worker,
            files_url=self.files_url,
        )

    @classmethod
    def load(
        cls,
        *,
        database_url: str | None = None,
        app: str | None = None,
        model: str | None = None,
        secret: str | None = None,
        host: str | None = None,
        port: int | None = None,
        data_dir: Path | str | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> Settings:
        """Resolve the settings: explicit values (CLI flags) win, then environment variables, then defaults.

        `None` means "not given". The data directory is created only when a default needs it
        (the SQLite file or the secret).

        Args:
            database_url: Overrides `DURABLE_CHAT_DATABASE_URL`.
            app: Overrides `DURABLE_CHAT_APP`.
            model: Overrides `DURABLE_CHAT_MODEL`.
            secret: Overrides `DURABLE_CHAT_SECRET`.
            host: Address to listen on.
            port: Port to listen on.
            data_dir: Overrides `DURABLE_CHAT_DATA_DIR`.
            environ: The environment to read; `os.environ` by default.

        Raises:
            SettingsError: The data directory or the secret file cannot be created or read.
        """
        from agent import DEFAULT_SAMPLE_RATIO, DEFAULT_TRACE_FILES, DEFAULT_TRACE_MAX_BYTES, TracingConfig

        env = os.environ if environ is None else environ
        directory = _data_dir(data_dir, env)
        secret = cls.resolve_secret(secret, data_dir=directory, environ=env)
        lease = _number("LEASE_SECONDS", env, 30.0)
        # 0: the trace file is never rotated (it grows without bound).
        trace_max_mb = _number("TRACE_MAX_MB", env, DEFAULT_TRACE_MAX_BYTES / _MB, zero=True)
        heartbeat = _number("HEARTBEAT_SECONDS", env, min(10.0, lease / 3))
        if heartbeat >= lease:
            raise SettingsError(
                f"{ENV_PREFIX}HEARTBEAT_SECONDS ({heartbeat:g}) must be shorter than "
                f"{ENV_PREFIX}LEASE_SECONDS ({lease:g}), or leases lapse between heartbeats"
            )
        hooks = _webhooks(env)
        jwt = _jwt(env)
        return cls(
            database_url=cls.resolve_database_url(database_url, data_dir=directory, environ=env),
            app=_pick(app, "APP", env) or DEFAULT_APP,
            model=_pick(model, "MODEL", env),
            secret=secret,
            host=_DEFAULT_HOST if host is None else host,
            port=_DEFAULT_PORT if port is None else port,
            data_dir=directory,
            rate_limit_burst=_number("RATE_LIMIT_BURST", env, 120.0),
            sse_ping_seconds=_number("SSE_PING_SECONDS", env, 15.0),
            rate_limit_per_second=_number("RATE_LIMIT_PER_SECOND", env, 10.0),
            messages_per_minute=max(1, round(_number("MESSAGES_PER_MINUTE", env, 30))),
            statement_timeout_seconds=_timeout("STATEMENT_TIMEOUT", env, 30.0),
            lock_timeout_seconds=_timeout("LOCK_TIMEOUT", env, 10.0),
            idle_in_transaction_timeout_seconds=_timeout("IDLE_IN_TRANSACTION_TIMEOUT", env, 60.0),
            pool_size=int(_number("POOL_SIZE", env, 30, whole=True)),
            pool_max_overflow=int(_number("POOL_MAX_OVERFLOW", env, 0, whole=True, zero=True)),
            pool_pre_ping=_flag("POOL_PRE_PING", env, False),
            transaction_pooler=_flag("TRANSACTION_POOLER", env, False),
            listen_url=_pick(None, "LISTEN_URL", env),
            lease_seconds=lease,
            heartbeat_seconds=heartbeat,
            sweep_seconds=_number("SWEEP_SECONDS", env, 5.0),
            event_replay_seconds=_number("EVENT_REPLAY_SECONDS", env, 3600.0, zero=True),
            deadline_poll_seconds=_number("DEADLINE_POLL_SECONDS", env, 1.0),
            max_runs=int(_number("MAX_RUNS", env, 64, whole=True)),
            max_streams_per_user=int(_number("MAX_STREAMS_PER_USER", env, 20, whole=True)),
            shutdown_timeout_seconds=_number("SHUTDOWN_SECONDS", env, 10.0),
            max_file_bytes=round(_number("MAX_FILE_MB", env, 20) * _MB),
            file_quota_bytes=round(_number("FILE_QUOTA_MB", env, 500) * _MB),
            file_types=_file_types(env),
            files_url=cls.resolve_files_url(env),
            jwt=jwt,
            webhook_urls=hooks[0],
            webhook_secret=hooks[1],
            tracing=TracingConfig(
                trace_file=cls.resolve_trace_file(data_dir=directory, environ=env),
                trace_max_bytes=round(trace_max_mb * _MB) or None,
                trace_files=int(_number("TRACE_FILES", env, DEFAULT_TRACE_FILES, whole=True, zero=True)),
                otlp_endpoint=_pick(None, "OTLP_ENDPOINT", env),
                include_content=_flag("TRACE_CONTENT", env, False),
                sample_ratio=_ratio("TRACE_SAMPLE", env, DEFAULT_SAMPLE_RATIO),
                store_spans=_flag("TRACE_STORE", env, False),
                secrets=(
                    secret,
                    *([jwt.secret] if jwt and jwt.secret else []),
                    *secrets_from_environment(env),
                ),
            ),
        )

    @staticmethod
    def resolve_secret(
        secret: str | None = None,
        *,
        data_dir: Path | str | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> str:
        """The secret alone, resolved as `load` does, for commands that need nothing else (`token`).

        Raises:
            SettingsError: The secret file cannot be created or read.
        """
        env = os.environ if environ is None else environ
        return _pick(secret, "SECRET", env) or _stored_secret(_data_dir(data_dir, env))

    @staticmethod
    def resolve_trace_file(
        *, data_dir: Path | str | None = None, environ: Mapping[str, str] | None = None
    ) -> Path | None:
        """The JSONL trace file: `DURABLE_CHAT_TRACE_FILE` (`off` for none), else `traces.jsonl` in the data directory."""
        env = os.environ if environ is None else environ
        configured = _pick(None, "TRACE_FILE", env)
        if configured is not None:
            return None if configured.lower() == _OFF else Path(configured).absolute()
        return _data_dir(data_dir, env) / _TRACE_FILE

    @staticmethod
    def resolve_files_url(environ: Mapping[str, str] | None = None) -> str | None:
        """Where files' bytes are kept, resolved as `load` does, for commands that delete them (`purge`)."""
        return _pick(None, "FILES_URL", os.environ if environ is None else environ)

    @staticmethod
    def resolve_database_url(
        database_url: str | None = None,
        *,
        data_dir: Path | str | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> str:
        """The database URL alone, resolved as `load` does, for commands that need no secret (`migrate`).

        Raises:
            SettingsError: The default database needs a data directory that cannot be created.
        """
        env = os.environ if environ is None else environ
        url = _pick(database_url, "DATABASE_URL", env)
        if url is not None:
            return url
        directory = _data_dir(data_dir, env)
        _ensure_dir(directory)
        return f"sqlite+aiosqlite:///{directory / _DATABASE_FILE}"


def _file_types(env: Mapping[str, str]) -> frozenset[str]:
    text = _pick(None, "FILE_TYPES", env)
    if text is None:
        return DEFAULT_MEDIA_TYPES
    types = frozenset(t.strip().lower() for t in text.split(",") if t.strip())
    if not types or any("/" not in t for t in types):
        raise SettingsError(f"{ENV_PREFIX}FILE_TYPES must be media types separated by commas, not {text!r}")
    return types


def _no_tracing() -> TracingConfig:
    from agent import TracingConfig

    return TracingConfig(trace_file=None)


def _jwt(env: Mapping[str, str]) -> JwtSettings | None:
    """The identity provider's settings, when `DURABLE_CHAT_JWT_SECRET` or `_JWT_JWKS_URL` is set."""
    secret, jwks_url = _pick(None, "JWT_SECRET", env), _pick(None, "JWT_JWKS_URL", env)
    algorithm = _pick(None, "JWT_ALGORITHM", env)
    if secret is None and jwks_url is None:
        if algorithm is not None or _pick(None, "JWT_AUDIENCE", env) is not None:
            raise SettingsError(
                f"{ENV_PREFIX}JWT_ALGORITHM and _AUDIENCE need {ENV_PREFIX}JWT_SECRET or {ENV_PREFIX}JWT_JWKS_URL"
            )
        return None
    if secret is not None and jwks_url is not None:
        raise SettingsError(f"set {ENV_PREFIX}JWT_SECRET (HS256) or {ENV_PREFIX}JWT_JWKS_URL, not both")
    if secret is not None and len(secret.encode()) < 32:
        # RFC 7518: an HS256 key at least as long as the hash; PyJWT warns about shorter ones.
        raise SettingsError(f"{ENV_PREFIX}JWT_SECRET must be at least 32 bytes long")
    if jwks_url is not None and not _trusted_url(jwks_url):
        raise SettingsError(
            f"{ENV_PREFIX}JWT_JWKS_URL must be an https:// URL (http:// only on the loopback), not {jwks_url!r}"
        )
    allowed: tuple[JwtAlgorithm, ...] = (
        ("HS256",) if secret is not None else tuple(a for a in JWT_ALGORITHMS if a != "HS256")
    )
    wanted = algorithm or allowed[0]
    pinned: JwtAlgorithm | None = None
    for candidate in allowed:
        if candidate == wanted:
            pinned = candidate
    if pinned is None:
        raise SettingsError(
            f"{ENV_PREFIX}JWT_ALGORITHM must be one of {', '.join(allowed)} here, not {algorithm!r}"
        )
    audience = _pick(None, "JWT_AUDIENCE", env)
    if audience is None:
        raise SettingsError(
            f"{ENV_PREFIX}JWT_AUDIENCE is required: the audience ('aud') tokens for this service name"
        )
    return JwtSettings(
        algorithm=pinned,
        audience=audience,
        issuer=_pick(None, "JWT_ISSUER", env),
        secret=secret,
        jwks_url=jwks_url,
        user_claim=_pick(None, "JWT_USER_CLAIM", env) or "sub",
        roles_claim=_pick(None, "JWT_ROLES_CLAIM", env) or "roles",
    )


def _trusted_url(url: str) -> bool:
    # Keys fetched over plain HTTP could be swapped on the way; a loopback address serves tests.
    parsed = urlsplit(url)
    if parsed.scheme == "https" and parsed.hostname:
        return True
    return parsed.scheme == "http" and parsed.hostname in {"127.0.0.1", "localhost", "::1"}


def _pick(explicit: str | None, name: str, env: Mapping[str, str]) -> str | None:
    # An empty variable counts as unset, as `FOO= cmd` is a common way to unset one.
    return explicit if explicit is not None else (env.get(ENV_PREFIX + name) or None)


def _number(
    name: str, env: Mapping[str, str], default: float, *, whole: bool = False, zero: bool = False
) -> float:
    text = _pick(None, name, env)
    if text is None:
        return default
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not (value >= 0 if zero else value > 0) or value == float("inf") or (whole and not value.is_integer()):
        kind = "whole number" if whole else "number"
        raise SettingsError(
            f"{ENV_PREFIX}{name} must be a {'non-negative' if zero else 'positive'} {kind}, not {text!r}"
        )
    return value


def _ratio(name: str, env: Mapping[str, str], default: float) -> float:
    """A share between 0 and 1."""
    value = _number(name, env, default, zero=True)
    if value > 1:
        raise SettingsError(f"{ENV_PREFIX}{name} must be between 0 and 1, not {value!r}")
    return value


def _timeout(name: str, env: Mapping[str, str], default: float) -> float | None:
    """Seconds, with 0 meaning no timeout."""
    value = _number(name, env, default, zero=True)
    return value or None


def _flag(name: str, env: Mapping[str, str], default: bool) -> bool:
    text = _pick(None, name, env)
    if text is None:
        return default
    match text.strip().lower():
        case "1" | "true" | "yes" | "on":
            return True
        case "0" | "false" | "no" | "off":
            return False
        case _:
            raise SettingsError(f"{ENV_PREFIX}{name} must be 1 or 0 (true or false), not {text!r}")


def _data_dir(explicit: Path | str | None, env: Mapping[str, str]) -> Path:
    return Path(_pick(None if explicit is None else str(explicit), "DATA_DIR", env) or "data").absolute()


def _ensure_dir(directory: Path) -> None:
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise SettingsError(
            f"cannot create the data directory {str(directory)!r}: {error.strerror}"
        ) from error


def _stored_secret(directory: Path) -> str:
    """The secret kept in `directory`, generated on first use with owner-only permissions."""
    _ensure_dir(directory)
    path = directory / _SECRET_FILE
    try:
        if not path.exists():
            _create_secret(path)
        stored = path.read_text(encoding="utf-8").strip()
    except OSError as error:
        raise SettingsError(
            f"cannot read or create the secret file {str(path)!r}: {error.strerror}"
        ) from error
    if not stored:
        raise SettingsError(f"the secret file {str(path)!r} is empty; delete it to generate a new secret")
    return stored


def _create_secret(path: Path) -> None:
    # Written under a temporary name, then linked into place: a link never overwrites, so two
    # processes starting at once agree on one secret, and nobody reads a half-written file.
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        with os.fdopen(descriptor, "w", encoding="utf-8") as file:
            file.write(secrets.token_urlsafe(32) + "\n")
        os.link(temporary, path)
    except FileExistsError:
        pass  # another process won the race; its secret is the one to use
    finally:
        temporary.unlink(missing_ok=True)


def _webhooks(env: Mapping[str, str]) -> tuple[tuple[str, ...], str | None]:
    """`webhook_urls` and `webhook_secret` from the environment; a URL without a usable secret is refused."""
    urls = tuple(u.strip() for u in (_pick(None, "WEBHOOK_URL", env) or "").split(",") if u.strip())
    secret = _pick(None, "WEBHOOK_SECRET", env)
    if not urls:
        return (), None
    for url in urls:
        if urlsplit(url).scheme not in ("http", "https") or not urlsplit(url).hostname:
            raise SettingsError(f"{ENV_PREFIX}WEBHOOK_URL holds {url[:80]!r}, not an http(s) URL")
    if secret is None or not secret.startswith("whsec_"):
        raise SettingsError(
            f"{ENV_PREFIX}WEBHOOK_URL needs {ENV_PREFIX}WEBHOOK_SECRET, a Standard Webhooks 'whsec_…' secret"
        )
    from standardwebhooks.webhooks import Webhook

    try:
        Webhook(secret)
    except Exception as error:
        raise SettingsError(f"{ENV_PREFIX}WEBHOOK_SECRET is not a 'whsec_' followed by base64") from error
    return urls, secret
