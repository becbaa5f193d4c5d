"""The `durable-chat` command line, run as a real process (`python -m cli`)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from cli import main

REPO_ROOT = Path(__file__).resolve().parent.parent


def run_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run `python -m cli ARGS` in `cwd`, with no `DURABLE_CHAT_*` variable inherited."""
    env = {name: value for name, value in os.environ.items() if not name.startswith("DURABLE_CHAT_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    return subprocess.run(
        [sys.executable, "-m", "cli", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


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


def test_token_is_not_implemented_yet(tmp_path: Path) -> None:
    result = run_cli("token", "alice", cwd=tmp_path)

    assert result.returncode == 2
    assert result.stderr == "durable-chat: 'token' is not implemented yet\n"


@pytest.mark.parametrize("args", [["chat", "--user", "alice"], ["threads"]])
def test_later_commands_are_not_implemented_yet(args: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(args) == 2
    assert "not implemented yet" in capsys.readouterr().err


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
