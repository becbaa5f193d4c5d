"""`durable-chat token --role` and `durable-chat webhooks`, as processes."""

from __future__ import annotations

from pathlib import Path

from web.tokens import verify_token

from .test_cli import run_cli


def test_token_signs_the_roles_it_is_given(tmp_path: Path) -> None:
    env = {"DURABLE_CHAT_SECRET": "s3cret"}
    result = run_cli("token", "sam", "--role", "support", "--role", "managers", cwd=tmp_path, env=env)

    assert result.returncode == 0, result.stderr
    claims = verify_token("s3cret", result.stdout.strip())
    assert (claims.user_id, claims.roles) == ("sam", ("support", "managers"))


def test_token_refuses_the_role_user(tmp_path: Path) -> None:
    result = run_cli("token", "sam", "--role", "user", cwd=tmp_path, env={"DURABLE_CHAT_SECRET": "s3cret"})

    assert result.returncode == 2
    assert result.stdout == ""
    assert "role" in result.stderr


def test_webhooks_with_nothing_to_send(tmp_path: Path) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'chat.db'}"
    result = run_cli("webhooks", "--db", url, cwd=tmp_path)

    assert result.returncode == 0, result.stderr
    assert result.stdout == "no webhooks pending or failing\n"
