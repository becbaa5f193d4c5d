"""The browser page, driven by Playwright in Debian's headless Chromium against a real server.

The module starts `python -m cli serve` on a free port with a fresh SQLite file and the demo model;
each test signs in through the URL fragment, opens its own new thread and uses the page as a
person would. Playwright's own browser
download is never used: the tests run `/usr/bin/chromium` (`apt-get install chromium`), and skip
without it, or fail when `CI=true`.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, expect, sync_playwright

from web.tokens import issue_token

CHROMIUM = Path("/usr/bin/chromium")
SECRET = "test-secret"
REPO = Path(__file__).resolve().parent.parent
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
STARTUP_TIMEOUT_S = 30.0
# The demo model is offline and fast; this only bounds a hung run.
TIMEOUT_MS = 15_000
expect.set_options(timeout=TIMEOUT_MS)


@dataclass
class Server:
    """A running `durable-chat serve`; `restart()` stops it and starts it again on the same port and database."""

    port: int
    database_url: str
    log_path: Path
    process: subprocess.Popen[bytes] | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        command = [sys.executable, "-m", "cli", "serve", "--port", str(self.port)]
        command += ["--db", self.database_url, "--model", "demo"]
        env = {**os.environ, "DURABLE_CHAT_SECRET": SECRET}
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(command, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                pytest.fail(f"the server exited with {self.process.returncode}:\n{self.log()}")
            try:
                with urllib.request.urlopen(f"{self.base_url}/healthz", timeout=1) as response:
                    if response.status == 200:
                        return
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            time.sleep(0.1)
        self.stop()
        pytest.fail(f"the server did not answer /healthz within {STARTUP_TIMEOUT_S}s:\n{self.log()}")

    def stop(self) -> None:
        if self.process is None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.process = None

    def restart(self) -> None:
        self.stop()
        self.start()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """One server for the module (it takes seconds to start); each test works in its own new thread."""
    directory = tmp_path_factory.mktemp("server")
    server = Server(
        port=free_port(),
        database_url=f"sqlite+aiosqlite:///{directory}/t.db",
        log_path=directory / "server.log",
    )
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    if not CHROMIUM.exists():
        reason = f"{CHROMIUM} is missing: `apt-get install chromium` to run the browser tests"
        if os.environ.get("CI") == "true":
            pytest.fail(reason)
        pytest.skip(reason)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    context = browser.new_context(viewport={"width": 1200, "height": 800})
    context.set_default_timeout(TIMEOUT_MS)
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    try:
        yield page
    finally:
        context.close()
    assert errors == [], f"the page raised: {errors}"


@contextmanager
def _server_log_on_failure(server: Server) -> Iterator[None]:
    try:
        yield
    except AssertionError as error:
        raise AssertionError(f"{error}\n--- server log ---\n{server.log()}") from error


def _sign_in(page: Page, server: Server) -> None:
    token = issue_token(SECRET, "alice")
    page.goto(f"{server.base_url}/#token={token}")
    expect(page.get_by_test_id("new-thread")).to_be_visible()
    expect(page.get_by_test_id("thread-list")).to_be_attached()
    # The token leaves the address bar at once (and the fragment never reached the server).
    assert token not in page.url


def _new_chat_and_send(page: Page, text: str) -> None:
    page.get_by_test_id("new-thread").click()
    message_input = page.get_by_test_id("message-input")
    expect(message_input).to_be_focused()
    message_input.fill(text)
    message_input.press("Enter")
    expect(page.get_by_test_id("user-message").last).to_have_text(text)
    expect(message_input).to_have_value("")


def test_refund_with_approval(server: Server, page: Page, tmp_path: Path) -> None:
    with _server_log_on_failure(server):
        _sign_in(page, server)
        _new_chat_and_send(page, "Please refund ORD-5678")
        calls = page.get_by_test_id("tool-call")
        expect(calls.filter(has_text="lookup_order")).to_have_count(1)
        expect(calls.filter(has_text="issue_refund")).to_contain_text("99.98")
        lookup = page.get_by_test_id("tool-result").filter(has_text="lookup_order")
        expect(lookup).to_contain_text("success")

        card = page.get_by_test_id("approval-card")
        expect(card).to_have_count(1)
        expect(card).to_contain_text("issue_refund")
        expect(card.get_by_test_id("approval-args")).to_contain_text('"amount": 99.98')
        expect(page.get_by_test_id("run-status")).to_have_attribute("data-status", "awaiting_approval")
        card.get_by_test_id("approve").click()

        expect(card.get_by_test_id("approval-decision")).to_contain_text("Approved")
        expect(card.get_by_test_id("approve")).to_have_count(0)
        refund = page.get_by_test_id("tool-result").filter(has_text="issue_refund")
        expect(refund).to_have_attribute("data-outcome", "success")
        final = page.get_by_test_id("assistant-text").last
        expect(final).to_contain_text("Refunded $99.98 for ORD-5678.")
        expect(page.get_by_test_id("run-status")).to_have_attribute("data-status", "completed")
        current = page.get_by_test_id("thread-item").first
        expect(current).to_have_attribute("aria-current", "true")
        # The new thread is named after its first message, in the list and in the header.
        expect(current.locator(".thread-name")).to_have_text("Please refund ORD-5678")
        expect(page.get_by_test_id("thread-title")).to_have_text("Please refund ORD-5678")
        page.screenshot(path=tmp_path / "page.png", full_page=True)


def test_reload_mid_stream_shows_the_whole_conversation(server: Server, page: Page) -> None:
    with _server_log_on_failure(server):
        _sign_in(page, server)
        _new_chat_and_send(page, "Where is my order ORD-9012?")
        # Reload as soon as the run shows anything: what was stored plus the events after it is everything.
        expect(page.get_by_test_id("tool-call").first).to_be_attached()
        page.reload()
        _expect_whole_lookup_conversation(page)
        # A second reload, after the run ended, shows the same conversation from stored messages alone.
        page.reload()
        _expect_whole_lookup_conversation(page)


def _expect_whole_lookup_conversation(page: Page) -> None:
    expect(page.get_by_test_id("user-message")).to_have_text(["Where is my order ORD-9012?"])
    expect(page.get_by_test_id("tool-call")).to_have_count(1)
    expect(page.get_by_test_id("tool-call")).to_contain_text("lookup_order")
    expect(page.get_by_test_id("tool-result")).to_have_count(1)
    expect(page.get_by_test_id("assistant-text")).to_have_count(1)
    expect(page.get_by_test_id("assistant-text")).to_contain_text("ORD-9012")


def test_edit_arguments_then_approve(server: Server, page: Page) -> None:
    with _server_log_on_failure(server):
        _sign_in(page, server)
        _new_chat_and_send(page, "Please refund ORD-9012")
        card = page.get_by_test_id("approval-card")
        card.get_by_test_id("edit").click()
        editor = card.get_by_test_id("args-editor")
        expect(editor).to_be_focused()
        args = json.loads(editor.input_value())

        # Invalid JSON never reaches the server; arguments that fail the tool's schema come back as a 422.
        editor.fill("{not json")
        card.get_by_test_id("save-approve").click()
        expect(card.get_by_test_id("approval-error")).to_contain_text("Invalid JSON")
        editor.fill(json.dumps({**args, "amount": "fifty"}))
        card.get_by_test_id("save-approve").click()
        expect(card.get_by_test_id("approval-error")).to_contain_text("amount")
        expect(card.get_by_test_id("approve")).to_be_visible()

        editor.fill(json.dumps({**args, "amount": 50}, indent=2))
        card.get_by_test_id("save-approve").click()
        expect(card.get_by_test_id("approval-decision")).to_contain_text("Approved")
        expect(card.get_by_test_id("approval-decision")).to_contain_text('"amount":50')
        expect(page.get_by_test_id("tool-result").filter(has_text="issue_refund")).to_contain_text("50")
        expect(page.get_by_test_id("assistant-text").last).to_contain_text("Refunded $50.00")


def test_reject_with_a_reason(server: Server, page: Page) -> None:
    with _server_log_on_failure(server):
        _sign_in(page, server)
        _new_chat_and_send(page, "Please refund ORD-3456")
        card = page.get_by_test_id("approval-card")
        card.get_by_test_id("reject").click()
        reason = card.get_by_test_id("reason-input")
        expect(reason).to_be_focused()
        reason.fill("not eligible")
        reason.press("Enter")
        expect(card.get_by_test_id("approval-decision")).to_contain_text("Rejected")
        expect(card.get_by_test_id("approval-decision")).to_contain_text("not eligible")
        refund = page.get_by_test_id("tool-result").filter(has_text="issue_refund")
        expect(refund).to_have_attribute("data-outcome", "denied")
        expect(page.get_by_test_id("assistant-text").last).to_contain_text("not eligible")


def test_reconnects_after_the_server_restarts(server: Server, page: Page) -> None:
    with _server_log_on_failure(server):
        _sign_in(page, server)
        _new_chat_and_send(page, "Where is my order ORD-9012?")
        expect(page.get_by_test_id("assistant-text")).to_contain_text("ORD-9012")
        expect(page.get_by_test_id("connection")).to_have_attribute("data-state", "live")

        server.restart()
        message_input = page.get_by_test_id("message-input")
        message_input.fill("Where is my order ORD-3456?")
        page.get_by_test_id("send").click()
        # The stream resumed after its last id: the new run shows, and nothing before it doubled.
        expect(page.get_by_test_id("user-message")).to_have_count(2)
        expect(page.get_by_test_id("assistant-text")).to_have_count(2)
        expect(page.get_by_test_id("assistant-text").last).to_contain_text("ORD-3456")
        expect(page.get_by_test_id("tool-call")).to_have_count(2)


def test_a_second_message_while_awaiting_approval_is_refused_inline(server: Server, page: Page) -> None:
    with _server_log_on_failure(server):
        _sign_in(page, server)
        _new_chat_and_send(page, "Please refund ORD-5678")
        expect(page.get_by_test_id("approval-card")).to_be_visible()
        message_input = page.get_by_test_id("message-input")
        message_input.fill("hello?")
        message_input.press("Enter")
        expect(page.get_by_test_id("send-error")).to_contain_text("approval_pending")
        expect(message_input).to_have_value("hello?")


def test_without_a_token_the_page_asks_for_one(server: Server, page: Page) -> None:
    with _server_log_on_failure(server):
        page.goto(f"{server.base_url}/")
        form = page.get_by_test_id("token-form")
        expect(form).to_be_visible()
        page.get_by_test_id("token-input").fill("v1.bogus.1.bad")
        page.get_by_test_id("sign-in").click()
        expect(page.get_by_test_id("token-error")).to_be_visible()
        page.get_by_test_id("token-input").fill(issue_token(SECRET, "alice"))
        page.get_by_test_id("sign-in").click()
        expect(page.get_by_test_id("new-thread")).to_be_visible()


def test_reload_during_a_long_run_loses_and_doubles_nothing(server: Server, page: Page) -> None:
    with _server_log_on_failure(server):
        _sign_in(page, server)
        # The demo model calls a tool again after every result until the run's turn limit stops it,
        # with one closing text at the end: a run long enough to reload in the middle of.
        _new_chat_and_send(page, "loop forever ORD-5678")
        expect(page.get_by_test_id("tool-call").nth(1)).to_be_attached()
        page.reload()
        expect(page.get_by_test_id("assistant-text")).to_have_count(1)
        live = _transcript(page)
        page.reload()
        expect(page.get_by_test_id("assistant-text")).to_have_count(1)
        assert _transcript(page) == live


def _transcript(page: Page) -> list[str]:
    items = page.get_by_test_id("transcript").locator(":scope > *")
    return [f"{item.get_attribute('data-testid')}: {item.inner_text()}" for item in items.all()]
