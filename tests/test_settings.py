"""Settings: flags win over environment variables, which win over the defaults."""

from __future__ import annotations

import os
import re
import stat
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent.tracing import TracingConfig
from web import Settings, SettingsError

_VARIABLES = (
    "DATABASE_URL",
    "APP",
    "MODEL",
    "SECRET",
    "DATA_DIR",
    "TRACE_FILE",
    "OTLP_ENDPOINT",
    "TRACE_CONTENT",
    "TRACE_SAMPLE",
    "TRACE_STORE",
)


@pytest.fixture(autouse=True)
def workdir(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """A fresh working directory and an environment without any `DURABLE_CHAT_*` variable."""
    for name in _VARIABLES:
        monkeypatch.delenv(f"DURABLE_CHAT_{name}", raising=False)
    monkeypatch.chdir(tmp_path)
    return Path.cwd()


def test_defaults(workdir: Path) -> None:
    settings = Settings.load()

    data_dir = workdir / "data"
    assert settings.data_dir == data_dir
    assert settings.database_url == f"sqlite+aiosqlite:///{data_dir}/durable-chat.db"
    assert settings.model is None  # the app agent's own model
    assert settings.app == "agent.demo:shop_app"
    assert (settings.host, settings.port) == ("127.0.0.1", 8000)
    assert len(settings.secret) >= 32
    assert data_dir.is_dir()


def test_environment_overrides_defaults(monkeypatch: pytest.MonkeyPatch, workdir: Path) -> None:
    monkeypatch.setenv("DURABLE_CHAT_DATABASE_URL", "postgresql+asyncpg://env@db/chat")
    monkeypatch.setenv("DURABLE_CHAT_MODEL", "openai:gpt-4o")
    monkeypatch.setenv("DURABLE_CHAT_SECRET", "env-secret")
    monkeypatch.setenv("DURABLE_CHAT_DATA_DIR", str(workdir / "elsewhere"))

    settings = Settings.load()

    assert settings.database_url == "postgresql+asyncpg://env@db/chat"
    assert settings.model == "openai:gpt-4o"
    assert settings.secret == "env-secret"
    assert settings.data_dir == workdir / "elsewhere"
    # Nothing needed the data directory: the database and the secret came from the environment.
    assert not (workdir / "elsewhere").exists()


def test_flags_override_environment(monkeypatch: pytest.MonkeyPatch, workdir: Path) -> None:
    monkeypatch.setenv("DURABLE_CHAT_DATABASE_URL", "postgresql+asyncpg://env@db/chat")
    monkeypatch.setenv("DURABLE_CHAT_MODEL", "openai:gpt-4o")
    monkeypatch.setenv("DURABLE_CHAT_SECRET", "env-secret")
    monkeypatch.setenv("DURABLE_CHAT_DATA_DIR", str(workdir / "env-data"))

    settings = Settings.load(
        database_url="sqlite+aiosqlite:///flag.db",
        model="test",
        secret="flag-secret",
        host="0.0.0.0",
        port=8123,
        data_dir=workdir / "flag-data",
    )

    assert replace(settings, tracing=TracingConfig(trace_file=None)) == Settings(
        database_url="sqlite+aiosqlite:///flag.db",
        model="test",
        secret="flag-secret",
        host="0.0.0.0",
        port=8123,
        data_dir=workdir / "flag-data",
    )
    assert settings.tracing.trace_file == workdir / "flag-data" / "traces.jsonl"
    assert "flag-secret" in settings.tracing.secrets


def test_data_dir_from_environment_holds_the_defaults(monkeypatch: pytest.MonkeyPatch, workdir: Path) -> None:
    monkeypatch.setenv("DURABLE_CHAT_DATA_DIR", str(workdir / "state"))

    settings = Settings.load()

    assert settings.database_url == f"sqlite+aiosqlite:///{workdir}/state/durable-chat.db"
    assert (workdir / "state" / "secret").is_file()


def test_empty_variable_counts_as_unset(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DURABLE_CHAT_MODEL", "")

    assert Settings.load().model is None


def test_secret_is_generated_once_owner_only(workdir: Path) -> None:
    first = Settings.load()

    secret_file = workdir / "data" / "secret"
    assert stat.S_IMODE(secret_file.stat().st_mode) == 0o600
    assert secret_file.read_text().strip() == first.secret
    assert Settings.load().secret == first.secret
    assert [path.name for path in (workdir / "data").iterdir()] == ["secret"]


def test_secret_file_is_reused(workdir: Path) -> None:
    (workdir / "data").mkdir()
    (workdir / "data" / "secret").write_text("kept-from-last-time\n")

    assert Settings.load().secret == "kept-from-last-time"


def test_empty_secret_file_is_an_error(workdir: Path) -> None:
    (workdir / "data").mkdir()
    (workdir / "data" / "secret").write_text("")

    with pytest.raises(SettingsError, match="is empty"):
        Settings.load()


def test_unusable_data_dir_is_an_error(workdir: Path) -> None:
    (workdir / "data").write_text("a file, not a directory")

    with pytest.raises(SettingsError, match="cannot create the data directory"):
        Settings.load()


def test_secret_is_not_in_repr() -> None:
    settings = Settings.load(secret="do-not-print-me")

    assert "do-not-print-me" not in repr(settings)


def test_resolve_database_url_needs_no_secret(workdir: Path) -> None:
    assert Settings.resolve_database_url("sqlite+aiosqlite:///x.db") == "sqlite+aiosqlite:///x.db"
    assert not (workdir / "data").exists()

    assert Settings.resolve_database_url() == f"sqlite+aiosqlite:///{workdir}/data/durable-chat.db"
    assert not (workdir / "data" / "secret").exists()


def test_explicit_environ_replaces_os_environ(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DURABLE_CHAT_MODEL", "from-os-environ")

    settings = Settings.load(secret="s", environ={"DURABLE_CHAT_MODEL": "from-mapping"})

    assert settings.model == "from-mapping"
    assert os.environ["DURABLE_CHAT_MODEL"] == "from-os-environ"


def test_tracing_defaults_to_a_file_in_the_data_directory_without_content(workdir: Path) -> None:
    tracing = Settings.load(secret="the-signing-secret", environ={}).tracing

    assert tracing == TracingConfig(
        trace_file=workdir / "data" / "traces.jsonl",
        otlp_endpoint=None,
        include_content=False,
        secrets=("the-signing-secret",),
    )
    # Settings only name the file; the exporter creates it with the first span.
    assert not (workdir / "data" / "traces.jsonl").exists()


def test_tracing_from_environment(workdir: Path) -> None:
    environ = {
        "DURABLE_CHAT_TRACE_FILE": "spans/run.jsonl",
        "DURABLE_CHAT_OTLP_ENDPOINT": "http://collector:4318/v1/traces",
        "DURABLE_CHAT_TRACE_CONTENT": "1",
        "DURABLE_CHAT_SECRET": "env-signing-secret",
        "OPENAI_API_KEY": "sk-test-0123456789",
    }

    tracing = Settings.load(environ=environ).tracing

    assert tracing.trace_file == workdir / "spans" / "run.jsonl"
    assert tracing.otlp_endpoint == "http://collector:4318/v1/traces"
    assert tracing.include_content is True
    assert set(tracing.secrets) == {"env-signing-secret", "sk-test-0123456789"}
    assert Settings.resolve_trace_file(environ={"DURABLE_CHAT_TRACE_FILE": "off"}) is None
    assert (
        Settings.load(secret="s", environ={"DURABLE_CHAT_TRACE_CONTENT": "no"}).tracing.include_content
        is False
    )


def test_tracing_samples_a_tenth_of_runs_without_store_spans_by_default() -> None:
    tracing = Settings.load(secret="s", environ={}).tracing
    assert (tracing.sample_ratio, tracing.store_spans, tracing.exports) == (0.1, False, True)
    tuned = Settings.load(
        secret="s", environ={"DURABLE_CHAT_TRACE_SAMPLE": "1", "DURABLE_CHAT_TRACE_STORE": "1"}
    ).tracing
    assert (tuned.sample_ratio, tuned.store_spans) == (1.0, True)
    off = Settings.load(secret="s", environ={"DURABLE_CHAT_TRACE_FILE": "off"})
    # With nowhere to export, the agent runs without pydantic-ai's instrumentation at all.
    assert off.runtime_options().trace_agent is False
    assert Settings.load(secret="s", environ={}).runtime_options().trace_agent is True


@pytest.mark.parametrize("value", ["1.5", "-0.1", "some"])
def test_trace_sample_must_be_a_share(value: str) -> None:
    with pytest.raises(SettingsError, match=r"DURABLE_CHAT_TRACE_SAMPLE must be"):
        Settings.load(secret="s", environ={"DURABLE_CHAT_TRACE_SAMPLE": value})


@pytest.mark.parametrize("value", ["2", "maybe", "yes please"])
def test_trace_content_must_be_a_flag(value: str) -> None:
    with pytest.raises(
        SettingsError, match=r"DURABLE_CHAT_TRACE_CONTENT must be 1 or 0 \(true or false\), not "
    ):
        Settings.load(secret="s", environ={"DURABLE_CHAT_TRACE_CONTENT": value})


def test_messages_per_minute_from_environment() -> None:
    assert Settings.load(secret="s", environ={}).messages_per_minute == 30
    assert (
        Settings.load(secret="s", environ={"DURABLE_CHAT_MESSAGES_PER_MINUTE": "5"}).messages_per_minute == 5
    )
    with pytest.raises(SettingsError) as raised:
        Settings.load(secret="s", environ={"DURABLE_CHAT_MESSAGES_PER_MINUTE": "none"})
    assert str(raised.value) == "DURABLE_CHAT_MESSAGES_PER_MINUTE must be a positive number, not 'none'"


def test_lease_timings_default_and_come_from_the_environment() -> None:
    defaults = Settings.load(secret="s", environ={})
    assert (defaults.lease_seconds, defaults.heartbeat_seconds, defaults.sweep_seconds) == (30.0, 10.0, 5.0)

    settings = Settings.load(
        secret="s",
        environ={
            "DURABLE_CHAT_LEASE_SECONDS": "3",
            "DURABLE_CHAT_HEARTBEAT_SECONDS": "0.5",
            "DURABLE_CHAT_SWEEP_SECONDS": "0.25",
        },
    )
    assert (settings.lease_seconds, settings.heartbeat_seconds, settings.sweep_seconds) == (3.0, 0.5, 0.25)
    # A short lease alone gets a heartbeat that fits in it.
    assert Settings.load(secret="s", environ={"DURABLE_CHAT_LEASE_SECONDS": "6"}).heartbeat_seconds == 2.0


def test_the_runs_a_worker_drives_at_once_default_to_64_and_come_from_the_environment() -> None:
    assert Settings.load(secret="s", environ={}).max_runs == 64
    assert Settings.load(secret="s", environ={"DURABLE_CHAT_MAX_RUNS": "4"}).max_runs == 4
    with pytest.raises(SettingsError) as raised:
        Settings.load(secret="s", environ={"DURABLE_CHAT_MAX_RUNS": "0"})
    assert str(raised.value) == "DURABLE_CHAT_MAX_RUNS must be a positive whole number, not '0'"


def test_a_heartbeat_as_long_as_the_lease_is_an_error() -> None:
    environ = {"DURABLE_CHAT_LEASE_SECONDS": "5", "DURABLE_CHAT_HEARTBEAT_SECONDS": "5"}
    with pytest.raises(SettingsError, match="HEARTBEAT_SECONDS \\(5\\) must be shorter than"):
        Settings.load(secret="s", environ=environ)


@pytest.mark.parametrize("text", ["0", "-1", "soon", "inf", "nan"])
def test_a_lease_that_is_not_a_positive_number_is_an_error(text: str) -> None:
    with pytest.raises(
        SettingsError, match=f"DURABLE_CHAT_LEASE_SECONDS must be a positive number, not {text!r}"
    ):
        Settings.load(secret="s", environ={"DURABLE_CHAT_LEASE_SECONDS": text})


def test_the_app_comes_from_the_flag_then_the_environment() -> None:
    assert Settings.load(secret="s", environ={"DURABLE_CHAT_APP": "travel:app"}).app == "travel:app"
    assert (
        Settings.load(secret="s", app="mine:app", environ={"DURABLE_CHAT_APP": "travel:app"}).app
        == "mine:app"
    )


@given(text=st.text(max_size=12).filter(lambda t: t.strip() != "" and "\x00" not in t))
def test_any_sweep_interval_is_a_positive_number_or_a_settings_error(text: str) -> None:
    try:
        number = float(text)
    except ValueError:
        number = None
    environ = {"DURABLE_CHAT_SWEEP_SECONDS": text}
    if number is not None and 0 < number < float("inf"):
        assert Settings.load(secret="s", environ=environ).sweep_seconds == number
    else:
        with pytest.raises(SettingsError, match=re.escape(f"must be a positive number, not {text!r}")):
            Settings.load(secret="s", environ=environ)


def test_the_sse_keep_alive_interval_comes_from_the_environment() -> None:
    assert Settings.load(secret="s", environ={}).sse_ping_seconds == 15.0
    environ = {"DURABLE_CHAT_SSE_PING_SECONDS": "2.5"}
    assert Settings.load(secret="s", environ=environ).sse_ping_seconds == 2.5
    with pytest.raises(SettingsError) as raised:
        Settings.load(secret="s", environ={"DURABLE_CHAT_SSE_PING_SECONDS": "0"})
    assert str(raised.value) == "DURABLE_CHAT_SSE_PING_SECONDS must be a positive number, not '0'"


def test_the_shutdown_bound_is_read_from_the_environment() -> None:
    assert Settings.load(secret="s", environ={}).shutdown_timeout_seconds == 10.0
    environ = {"DURABLE_CHAT_SHUTDOWN_SECONDS": "4"}
    assert Settings.load(secret="s", environ=environ).shutdown_timeout_seconds == 4.0
    for text in ("0", "-1", "inf", "nan", "soon"):
        with pytest.raises(SettingsError) as raised:
            Settings.load(secret="s", environ={"DURABLE_CHAT_SHUTDOWN_SECONDS": text})
        assert str(raised.value) == f"DURABLE_CHAT_SHUTDOWN_SECONDS must be a positive number, not {text!r}"
