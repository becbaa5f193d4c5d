"""The page's threads and everything around the conversation, in Chromium against a real server.

Rename and delete, the records view, the run id, replies in sanitised markdown, copying, times,
plain-language notices (a bad link, the server unreachable), staying signed in across tabs, and a
sign-in link pasted into an open tab. One server for the module (see `tests.browser`).
"""

from __future__ import annotations

import re
from pathlib import Path

from playwright.sync_api import BrowserContext, Page, Route, expect

from .browser import check_accessibility, new_chat_and_send, screenshot, sign_in
from .live_server import LiveServer


def test_rename_then_delete_a_thread(server: LiveServer, page: Page) -> None:
    sign_in(page, server)
    new_chat_and_send(page, "Where is my order ORD-9012?")
    expect(page.get_by_test_id("assistant-text")).to_contain_text("ORD-9012")
    page.get_by_test_id("rename").click()
    rename = page.get_by_test_id("rename-input")
    expect(rename).to_be_focused()
    expect(rename).to_have_value("Where is my order ORD-9012?")
    rename.fill("Gadget order")
    rename.press("Enter")
    expect(page.get_by_test_id("thread-title")).to_have_text("Gadget order")
    item = page.get_by_test_id("thread-item").filter(has_text="Gadget order")
    expect(item).to_have_count(1)
    page.reload()
    expect(page.get_by_test_id("thread-title")).to_have_text("Gadget order")

    # Escape leaves the title alone.
    page.get_by_test_id("rename").click()
    page.get_by_test_id("rename-input").fill("Not this")
    page.get_by_test_id("rename-input").press("Escape")
    expect(page.get_by_test_id("rename-form")).to_be_hidden()
    expect(page.get_by_test_id("thread-title")).to_have_text("Gadget order")

    page.get_by_test_id("delete").click()
    expect(page.get_by_test_id("confirm-delete")).to_be_visible()
    expect(page.get_by_test_id("confirm-delete-no")).to_be_focused()
    page.get_by_test_id("confirm-delete-no").click()
    expect(page.get_by_test_id("thread-title")).to_have_text("Gadget order")
    page.get_by_test_id("delete").click()
    page.get_by_test_id("confirm-delete-yes").click()
    expect(page.get_by_test_id("no-thread")).to_be_visible()
    expect(page.get_by_test_id("thread-item").filter(has_text="Gadget order")).to_have_count(0)
    assert "thread=" not in page.url
    page.reload()
    expect(page.get_by_test_id("thread-item").filter(has_text="Gadget order")).to_have_count(0)


def test_the_records_view_and_the_run_id(server: LiveServer, context: BrowserContext, tmp_path: Path) -> None:
    context.grant_permissions(["clipboard-read", "clipboard-write"])
    page = context.new_page()
    sign_in(page, server)
    new_chat_and_send(page, "Some feedback: delivery was slow but support was great")
    expect(page.get_by_test_id("run-status")).to_have_attribute("data-status", "completed")
    records = page.get_by_test_id("records-button")
    records.click()
    expect(records).to_have_attribute("aria-expanded", "true")
    record = page.get_by_test_id("record")
    expect(record).to_have_count(1)
    expect(record.get_by_test_id("record-kind")).to_contain_text("feedback")
    expect(record).to_contain_text("sentiment")
    check_accessibility(page, "the records view")
    screenshot(page, "records", tmp_path)
    records.click()
    expect(page.get_by_test_id("records-panel")).to_be_hidden()

    # The run id is at hand, for `durable-chat trace`: copied as that command.
    run_id = page.get_by_test_id("run-id")
    full = run_id.get_attribute("data-run-id")
    assert full is not None
    assert re.fullmatch(r"[0-9a-f-]{36}", full)
    expect(run_id).to_have_text(f"run {full[:8]}")
    run_id.click()
    assert page.evaluate("navigator.clipboard.readText()") == f"durable-chat trace {full}"
    reply_run = page.get_by_test_id("reply-run-id").last
    expect(reply_run).to_have_attribute("title", f"durable-chat trace {full}")

    # Copy a reply; every message has its time.
    page.get_by_test_id("copy-reply").last.click()
    expect(page.get_by_test_id("copy-reply").last).to_have_text("Copied")
    reply = page.get_by_test_id("assistant-text").last.inner_text()
    assert page.evaluate("navigator.clipboard.readText()") == reply
    times = page.get_by_test_id("timestamp")
    expect(times).to_have_count(2)
    for stamp in times.all():
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT.*Z", stamp.get_attribute("datetime") or "")


def test_markdown_in_replies_is_rendered_and_sanitised(server: LiveServer, page: Page) -> None:
    sign_in(page, server)
    # The page's own renderer, in the real browser, on what a model might write.
    html = page.evaluate(
        """async () => {
            const { renderMarkdown } = await import('/static/markdown.js');
            const node = document.createElement('div');
            renderMarkdown(node, [
                '**Bold** and `code`', '', '- one', '- two', '', '1. first', '',
                '[docs](https://example.com/docs) [bad](javascript:alert(1))',
                '<img src=x onerror="window.hacked=1"><script>window.hacked=2</script>',
                '<a href="https://example.com" onclick="window.hacked=3">x</a>',
            ].join('\\n'));
            document.body.append(node);
            return node.innerHTML;
        }"""
    )
    assert "<strong>Bold</strong>" in html
    assert "<code>code</code>" in html
    assert "<ul>" in html
    assert html.count("<li>") == 3
    assert "<ol>" in html
    assert '<a href="https://example.com/docs" target="_blank" rel="noopener noreferrer">docs</a>' in html
    assert "javascript:" not in html
    assert "onerror" not in html
    assert "onclick" not in html
    assert "<script" not in html
    assert "<img" not in html
    assert page.evaluate("window.hacked") is None


def test_a_bad_thread_link_and_an_unreachable_server_get_plain_notices(
    server: LiveServer, page: Page
) -> None:
    sign_in(page, server)
    page.goto("/#thread=no-such-thread")
    notice = page.get_by_test_id("notice")
    expect(notice).to_have_text(re.compile("That conversation doesn't exist, or it was deleted."))
    expect(page.get_by_test_id("no-thread")).to_be_visible()
    check_accessibility(page, "a notice")
    page.get_by_test_id("dismiss-notice").click()
    expect(notice).to_be_hidden()

    # The network fails (as the browser sees a server that is down): the page says so in words.
    page.route("**/api/**", lambda route: route.abort("connectionrefused"))
    page.get_by_test_id("empty-new-thread").click()
    expect(notice).to_have_text(re.compile("Can't reach the server"))
    expect(page.get_by_text("Failed to fetch")).to_have_count(0)
    page.unroute("**/api/**")
    page.get_by_test_id("empty-new-thread").click()
    expect(page.get_by_test_id("message-input")).to_be_focused()


def test_a_thread_link_opened_while_the_thread_list_loads_stays_open(server: LiveServer, page: Page) -> None:
    sign_in(page, server)
    new_chat_and_send(page, "Where is my order ORD-9012?")
    expect(page.get_by_test_id("assistant-text")).to_contain_text("ORD-9012")
    thread_id = re.search(r"thread=([^&]+)", page.url).group(1)  # pyright: ignore[reportOptionalMemberAccess]

    # The page loads again, signed in, and its thread list is held back; the link is opened meanwhile.
    held: list[Route] = []
    the_list = re.compile(r"/api/threads(\?[^/]*)?$")
    page.route(the_list, lambda route: held.append(route))
    page.goto("/")
    expect(page.get_by_test_id("no-thread")).to_be_visible()
    page.goto(f"/#thread={thread_id}")
    expect(page.get_by_test_id("assistant-text")).to_contain_text("ORD-9012")
    assert len(held) == 1
    held[0].continue_()
    page.unroute(the_list)
    # The list arrives after the conversation: the conversation stays open.
    expect(page.get_by_test_id("thread-item").filter(has_text="Where is my order ORD-9012?")).to_be_visible()
    expect(page.get_by_test_id("no-thread")).to_be_hidden()
    expect(page.get_by_test_id("assistant-text")).to_contain_text("ORD-9012")


def test_signed_in_in_every_tab_until_sign_out_and_a_pasted_link_signs_in(
    server: LiveServer, context: BrowserContext
) -> None:
    first = context.new_page()
    sign_in(first, server)
    # Another tab of the same browser is signed in without a link.
    second = context.new_page()
    second.goto("/")
    expect(second.get_by_test_id("signed-in-as")).to_have_text("Signed in as alice")
    # Signing out in one signs out every tab.
    second.get_by_test_id("sign-out").click()
    expect(second.get_by_test_id("token-form")).to_be_visible()
    expect(first.get_by_test_id("token-form")).to_be_visible()
    first.reload()
    expect(first.get_by_test_id("token-form")).to_be_visible()

    # A sign-in link pasted into the open tab's address bar (only the fragment changes: no reload).
    first.evaluate("() => { window.notReloaded = true; }")
    first.goto(f"/#token={server.token('bob')}")
    expect(first.get_by_test_id("signed-in-as")).to_have_text("Signed in as bob")
    assert first.evaluate("window.notReloaded") is True
    assert "token=" not in first.url
    expect(second.get_by_test_id("signed-in-as")).to_have_text("Signed in as bob")


def test_the_empty_states_offer_the_apps_starter_prompts(
    server: LiveServer, page: Page, tmp_path: Path
) -> None:
    sign_in(page, server)
    expect(page.get_by_test_id("brand")).to_have_text("Shop support")
    home = page.get_by_test_id("home-starters").get_by_test_id("starter-prompt")
    expect(home).to_have_count(5)
    expect(home.first).to_have_text("Where is ORD-5678?")
    check_accessibility(page, "the starter prompts")
    screenshot(page, "starters", tmp_path)
    # A prompt picked on the home screen starts a new chat with it.
    home.first.click()
    expect(page.get_by_test_id("user-message")).to_have_text(["Where is ORD-5678?"])
    expect(page.get_by_test_id("assistant-text")).to_contain_text("ORD-5678")
    expect(page.get_by_test_id("thread-title")).to_have_text("Where is ORD-5678?")
    expect(page.get_by_test_id("starter-prompts")).to_be_hidden()
    # An empty thread offers them too; once it has messages, no more.
    page.get_by_test_id("new-thread").click()
    in_thread = page.get_by_test_id("starter-prompts").get_by_test_id("starter-prompt")
    expect(in_thread).to_have_count(5)
    in_thread.filter(has_text="What is your warranty?").click()
    expect(page.get_by_test_id("assistant-text")).to_contain_text("warranty")
    expect(page.get_by_test_id("starter-prompts")).to_be_hidden()
