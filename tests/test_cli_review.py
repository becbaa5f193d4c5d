"""`durable-chat token --role` and `durable-chat webhooks`, as processes."""

from __future__ import annotations

from pathlib import Path

import httpx

from web.tokens import verify_token

from .live_server import served_on_a_terminal
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


def test_serve_on_a_terminal_prints_a_customer_link_and_a_reviewer_link(tmp_path: Path) -> None:
    app = ("--app", "agent.demo:staffed_shop_app")
    with served_on_a_terminal(tmp_path, "pty-review-secret", *app, until=b"review#token=") as (port, printed):
        lines = [text.strip() for text in printed.splitlines() if "#token=" in text]
        base = f"http://127.0.0.1:{port}/"
        assert [line.split("#token=")[0] for line in lines] == [
            f"durable-chat is ready: open {base}",
            f"review as reviewer (support, managers): {base}review",
        ]
        customer, reviewer = (line.split("#token=", 1)[1] for line in lines)
        claims = [verify_token("pty-review-secret", token) for token in (customer, reviewer)]
        assert [(c.user_id, c.roles) for c in claims] == [("demo", ()), ("reviewer", ("support", "managers"))]
        page = httpx.get(f"{base}review", timeout=10)
        assert (page.status_code, page.headers["content-type"]) == (200, "text/html; charset=utf-8")
        assert '<script type="module" src="/static/review.js">' in page.text
        auth = {"Authorization": f"Bearer {reviewer}"}
        queue = httpx.get(f"{base}api/review/approvals", headers=auth, timeout=10)
        assert queue.json() == {"approvals": [], "next_cursor": None, "last_event_id": 0}
        plain = httpx.get(f"{base}api/review/approvals", headers={"Authorization": f"Bearer {customer}"})
        assert (plain.status_code, plain.json()["error"]["code"]) == (404, "not_found")
