"""What the browser tests share: Debian's Chromium driven by Playwright, sign-in, axe-core, screenshots.

Each browser test module starts one real server (`live_server`) and one browser for all its tests;
each test gets a fresh browser context (its own storage) and works in its own new thread.
Playwright's own browser download is never used: the tests run `/usr/bin/chromium`
(`apt-get install chromium`), and skip without it, or fail when `CI=true`.

Screenshots of the main states go to `$DURABLE_CHAT_SCREENSHOTS` when it is set (`make screenshots`
sets it to `docs/screenshots`), else to the test's temporary directory: the same code runs either way.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from axe_playwright_python.sync_playwright import Axe
from playwright.sync_api import Browser, BrowserContext, Page, expect, sync_playwright

from .live_server import LiveServer

CHROMIUM = Path("/usr/bin/chromium")
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
# The demo model is offline and fast; this only bounds a hung run.
TIMEOUT_MS = 20_000
expect.set_options(timeout=TIMEOUT_MS)
DESKTOP = {"width": 1200, "height": 800}
PHONE = {"width": 390, "height": 844}
SCREENSHOTS_VARIABLE = "DURABLE_CHAT_SCREENSHOTS"

_axe = Axe()


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    if not CHROMIUM.exists():
        reason = f"{CHROMIUM} is missing: `apt-get install chromium` to run the browser tests"
        if os.environ.get("CI") == "true":
            pytest.fail(reason)
        pytest.skip(reason)
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            yield launched
        finally:
            launched.close()


@contextmanager
def opened_context(browser: Browser, server: LiveServer, **options: object) -> Iterator[BrowserContext]:
    """A fresh context (storage, clipboard rights) whose pages must raise no error."""
    options.setdefault("viewport", DESKTOP)
    context = browser.new_context(base_url=server.base_url, **options)  # pyright: ignore[reportArgumentType]
    context.set_default_timeout(TIMEOUT_MS)
    errors: list[str] = []
    context.on("page", lambda page: page.on("pageerror", lambda error: errors.append(str(error))))
    try:
        yield context
    except AssertionError as error:
        raise AssertionError(f"{error}\n--- server log ---\n{server_log(server)}") from error
    finally:
        context.close()
    assert errors == [], f"the page raised: {errors}"


@pytest.fixture
def context(browser: Browser, server: LiveServer) -> Iterator[BrowserContext]:
    with opened_context(browser, server) as opened:
        yield opened


@pytest.fixture
def page(context: BrowserContext) -> Page:
    return context.new_page()


def server_log(server: LiveServer) -> str:
    logs = sorted(server.workdir.glob("stderr-*.txt"))
    return logs[-1].read_text(errors="replace")[-4000:] if logs else ""


def sign_in(page: Page, server: LiveServer, user: str = "alice") -> str:
    """Open the page with a sign-in link for `user`; return the token."""
    token = server.token(user)
    page.goto(f"/#token={token}")
    expect(page.get_by_test_id("sign-out")).to_be_visible()
    expect(page.get_by_test_id("thread-list")).to_be_attached()
    # The token leaves the address bar at once (and the fragment never reached the server).
    assert token not in page.url
    return token


def new_chat(page: Page) -> None:
    page.get_by_test_id("new-thread").click()
    expect(page.get_by_test_id("message-input")).to_be_focused()


def send(page: Page, text: str) -> None:
    message_input = page.get_by_test_id("message-input")
    message_input.fill(text)
    message_input.press("Enter")
    expect(page.get_by_test_id("user-message").last).to_have_text(text)
    expect(message_input).to_have_value("")


def new_chat_and_send(page: Page, text: str) -> None:
    new_chat(page)
    send(page, text)


def check_accessibility(page: Page, what: str) -> None:
    """axe-core (the copy `axe-playwright-python` bundles) finds no violation on the page as it is."""
    results = _axe.run(page)
    assert results.violations_count == 0, f"axe-core on {what}:\n{results.generate_report()}"


def screenshot(page: Page, name: str, tmp_path: Path, *, full_page: bool = False) -> Path:
    """Save a screenshot of the page as `<name>.png` (see the module's notes for where)."""
    folder = Path(os.environ.get(SCREENSHOTS_VARIABLE) or tmp_path)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.png"
    page.screenshot(path=path, full_page=full_page, animations="disabled", caret="hide")
    return path


def in_viewport(page: Page, test_id: str, *, nth: int = -1) -> bool:
    """Whether the element is entirely inside the window (not left below the fold)."""
    locator = page.get_by_test_id(test_id)
    target = locator.last if nth == -1 else locator.nth(nth)
    box = target.bounding_box()
    viewport = page.viewport_size
    assert box is not None
    assert viewport is not None
    return (
        box["y"] >= 0
        and box["y"] + box["height"] <= viewport["height"]
        and box["x"] + box["width"] <= viewport["width"]
    )
