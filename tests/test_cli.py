"""The `durable-chat` command line, run as a real process (`python -m cli`)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from cli import main
from web.tokens import InvalidToken, verify_token

REPO_ROOT = Path(__file__).resolve().parent.parent


def cli_environment(env: dict[str, str] | None = None) -> dict[str, str]:
    """This process's environment for a `durable-chat` subprocess: our checkout first on the module
    path, no `DURABLE_CHAT_*` variable inherited but those in `env`."""
    environment = {name: value for name, value in os.environ.items() if not name.startswith("DURABLE_CHAT_")}
    environment["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), environment.get("PYTHONPATH")]))
    environment.update(env or {})
    return environment


def run_cli(
    *args: str, cwd: Path, env: dict[str, str] | None = None, input: str | None = None
) -> subprocess.CompletedProcess[str]:
    """Run `python -m cli ARGS` in `cwd`, with no `DURABLE_CHAT_*` variable inherited but those in `env`."""
    environment = cli_environment(env)
    return subprocess.run(
        [sys.executable, "-m", "cli", *args],
        cwd=cwd,
        env=environment,
        input=input,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def run_cli_reader_gone(
    *args: str, cwd: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run `python -m cli ARGS` with stdout a pipe whose reader has gone, as `… | head` once head exits.

    The read end is closed before the command starts, so its first line already meets a broken pipe.
    """
    environment = cli_environment(env)
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        return subprocess.run(
            [sys.executable, "-m", "cli", *args],
            cwd=cwd,
            env=environment,
            stdin=subprocess.DEVNULL,
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
            check=False,
        )
    finally:
        os.close(write_end)


def test_migrate_creates_the_database_then_finds_it_up_to_date(tmp_path: Path) -> None:
    database = tmp_path / "x.db"
    url = f"sqlite+aiosqlite:///{database}"

    first = run_cli("migrate", "--db", url, cwd=tmp_path)
    second = run_cli("migrate", "--db", url, cwd=tmp_path)

    assert (first.returncode, second.returncode) == (0, 0), first.stderr + second.stderr
    assert database.is_file()
    assert "schema revision" in first.stdout
    assert second.stdout == first.stdout
    assert "Traceback" not in first.stderr + second.stderr
    # An explicit database needs neither the default data directory nor a secret.
    assert not (tmp_path / "data").exists()


def test_migrate_defaults_to_sqlite_under_data(tmp_path: Path) -> None:
    result = run_cli("migrate", cwd=tmp_path)

    assert result.returncode == 0, result.stderr
    assert (tmp_path / "data" / "durable-chat.db").is_file()


def test_migrate_unsupported_dialect_is_one_line(tmp_path: Path) -> None:
    result = run_cli("migrate", "--db", "mysql://x/y", cwd=tmp_path)

    assert result.returncode == 1
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("durable-chat: error: ")
    assert "'mysql'" in lines[0]


def test_token_is_signed_with_the_secret_from_the_environment(tmp_path: Path) -> None:
    result = run_cli("token", "alice", cwd=tmp_path, env={"DURABLE_CHAT_SECRET": "s3cret"})

    assert result.returncode == 0, result.stderr
    token = result.stdout.strip()
    assert result.stdout == token + "\n"
    assert verify_token("s3cret", token).user_id == "alice"
    with pytest.raises(InvalidToken):
        verify_token("another secret", token)
    # The secret came from the environment: none was generated.
    assert not (tmp_path / "data" / "secret").exists()


def test_token_without_a_secret_uses_the_one_generated_in_the_data_directory(tmp_path: Path) -> None:
    first = run_cli("token", "alice", cwd=tmp_path)
    second = run_cli("token", "bob", cwd=tmp_path)

    assert (first.returncode, second.returncode) == (0, 0), first.stderr + second.stderr
    secret = (tmp_path / "data" / "secret").read_text().strip()
    assert verify_token(secret, first.stdout.strip()).user_id == "alice"
    assert verify_token(secret, second.stdout.strip()).user_id == "bob"


def test_token_for_an_empty_user_is_refused(tmp_path: Path) -> None:
    result = run_cli("token", "", cwd=tmp_path, env={"DURABLE_CHAT_SECRET": "s3cret"})

    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr.startswith("durable-chat: error: a user name must be")


def test_threads_lists_a_thread_made_by_a_chat_newest_first(tmp_path: Path) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'c.db'}"
    env = {"DURABLE_CHAT_DATABASE_URL": url}
    # Piped input, not a terminal: the chat reads it line by line all the same.
    older = run_cli("chat", "--user", "alice", cwd=tmp_path, env=env, input="Where is ORD-5678?\n/quit\n")
    newer = run_cli("chat", "--user", "alice", cwd=tmp_path, env=env, input="hello\n")  # EOF ends it
    other = run_cli("chat", cwd=tmp_path, env=env, input="")

    assert (older.returncode, newer.returncode, other.returncode) == (0, 0, 0), older.stderr + newer.stderr
    assert "assistant> Order ORD-5678: Widget Pro x2" in older.stdout
    ids = [re.search(r"--thread (\S+);", r.stdout) for r in (older, newer, other)]
    older_id, newer_id, demo_id = [match.group(1) for match in ids if match is not None]

    listed = run_cli("threads", "--user", "alice", cwd=tmp_path, env=env)
    assert listed.returncode == 0, listed.stderr
    header, *rows = listed.stdout.splitlines()
    assert header.split() == ["THREAD", "TITLE", "STATUS", "UPDATED", "(UTC)"]
    assert [row.split()[0] for row in rows] == [newer_id, older_id]
    # Each is named after its first message.
    assert "  hello  " in rows[0]
    assert "  Where is ORD-5678?  " in rows[1]
    assert all(" idle " in row for row in rows)

    demo = run_cli("threads", cwd=tmp_path, env=env)
    assert [row.split()[0] for row in demo.stdout.splitlines()[1:]] == [demo_id]


def test_listings_piped_into_a_reader_that_left_end_quietly(tmp_path: Path) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'c.db'}"
    env = {"DURABLE_CHAT_DATABASE_URL": url, "DURABLE_CHAT_SECRET": "s"}
    run_cli("chat", "--user", "alice", cwd=tmp_path, env=env, input="hello\n")
    for args in (
        ["threads", "--user", "alice"],
        ["threads", "--user", "nobody"],
        ["token", "alice"],
        ["migrate"],
    ):
        result = run_cli_reader_gone(*args, cwd=tmp_path, env=env)
        assert (result.returncode, result.stderr) == (0, ""), args


def test_bad_port_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["serve", "--port", "99999"])

    assert exit_info.value.code == 2
    assert "is not a port number" in capsys.readouterr().err


def test_command_is_required(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main([])

    assert exit_info.value.code == 2
    assert "usage: durable-chat" in capsys.readouterr().err
