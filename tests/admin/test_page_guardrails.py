"""The kill switch and resolve on the admin page, in a real browser (Debian's Chromium driven by
Playwright) against a real undoproxy in front of a real upstream: freeze a session from its
timeline and everything from the header, each after a confirmation; resolve an irreversible
step from the timeline. Screenshots are saved under each test's tmp dir."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.admin.browser import ARGS, CHROMIUM, WAIT, require_chromium
from tests.conftest import received
from tests.support.holding import in_thread, wait_pending
from tests.support.proc import Undoproxy
from tests.support.servers import ThreadedServer

require_chromium()

from playwright.sync_api import Browser, Dialog, Page, expect, sync_playwright  # noqa: E402

CONFIG = {
    "approvals": {"timeout": "60s"},
    "rules": [
        {
            "name": "hold-deletes",
            "match": {"host": "127.0.0.1", "method": "DELETE", "path": "/**"},
            "action": "hold",
        }
    ],
}
expect.set_options(timeout=WAIT)


@pytest.fixture(scope="module")
def up(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Undoproxy]:
    instance = Undoproxy(tmp_path_factory.mktemp("page-guardrails"), CONFIG).start()
    yield instance
    instance.stop()


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with sync_playwright() as p:
        launched = p.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
        yield launched
        launched.close()


@pytest.fixture
def page(browser: Browser, up: Undoproxy) -> Iterator[Page]:
    """A fresh browser context signed in as Ada."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    page.set_default_timeout(WAIT)
    page.goto(up.admin_url + "/sessions")
    page.fill("input[name=token]", up.token)
    page.fill("input[name=name]", "Ada")
    page.click("button[type=submit]")
    expect(page.locator("#live")).to_have_text("live")
    yield page
    context.close()


def _writes(server: ThreadedServer, marker: str) -> list[str]:
    return [r.method for r in received(server) if marker in r.path and r.method != "GET"]


def test_freezing_a_session_from_its_timeline_after_confirming(
    page: Page, up: Undoproxy, tls_upstream: ThreadedServer, session_id: str, tmp_path: Path
) -> None:
    marker = uuid.uuid4().hex
    url = f"{tls_upstream.base_url}/page/{marker}"
    with up.agent(session_id) as agent:
        assert agent.post(url, json={"n": 1}).status_code == 200
    held = in_thread(lambda: up.agent(session_id).delete(url, timeout=60))
    wait_pending(up, session_id)

    page.goto(f"{up.admin_url}/sessions/{session_id}")
    expect(page.locator("#freeze")).to_have_text("Freeze")
    dialogs: list[str] = []

    def dismiss(dialog: Dialog) -> None:
        dialogs.append(dialog.message)
        dialog.dismiss()

    page.once("dialog", dismiss)
    page.click("#freeze")  # changed my mind: nothing happens
    assert dialogs and dialogs[0].startswith(f"Freeze session {session_id}?")
    assert up.api("GET", f"/api/sessions/{session_id}").json()["frozen"] is False

    page.once("dialog", lambda d: d.accept())
    page.click("#freeze")
    expect(page.locator(".timeline h1 .state-frozen")).to_have_text("frozen")
    expect(page.locator("#freeze")).to_have_text("Unfreeze")
    page.screenshot(path=tmp_path / "timeline-frozen.png", full_page=True)

    denied = held.result(20)
    assert denied.status_code == 403 and "frozen" in denied.json()["reason"]
    with up.agent(session_id) as agent:
        assert agent.post(url, json={"n": 2}).json()["error"] == "undoproxy_frozen"
        assert agent.get(url).status_code == 200
    assert _writes(tls_upstream, marker) == ["POST"]

    page.click("nav a[href='/sessions']")
    row = page.locator("#sessions tr", has_text=session_id)
    expect(row.locator(".state-frozen")).to_be_visible()
    row.locator("a").click()

    page.once("dialog", lambda d: d.accept())
    page.click("#freeze")
    expect(page.locator("#freeze")).to_have_text("Freeze")
    expect(page.locator(".timeline h1 .state-frozen")).to_have_count(0)
    with up.agent(session_id) as agent:
        assert agent.post(url, json={"n": 3}).status_code == 200
    assert _writes(tls_upstream, marker) == ["POST", "POST"]


def test_resolving_an_irreversible_step_from_the_timeline(
    page: Page, up: Undoproxy, tls_upstream: ThreadedServer, session_id: str, tmp_path: Path
) -> None:
    with up.agent(session_id) as agent:
        assert agent.request("MKCOL", f"{tls_upstream.base_url}/dav/{session_id}").ok
        assert agent.get(f"{tls_upstream.base_url}/dav/{session_id}").ok
    report = up.api("POST", f"/api/sessions/{session_id}/rollback").json()
    assert report["state"] == "rollback_incomplete"
    step_id = report["steps"][0]["id"]

    page.goto(f"{up.admin_url}/sessions/{session_id}")
    rows = page.locator("#timeline-steps tbody tr")
    expect(rows).to_have_count(2)
    status = rows.nth(0).locator("td").nth(6)
    expect(status.locator(".state")).to_have_text("irreversible")
    expect(rows.nth(1).locator("button.resolve")).to_have_count(0)  # a read: nothing to resolve
    expect(page.locator(".timeline h1 .state")).to_have_text("rollback incomplete")

    asked: list[str] = []

    def answer(dialog: Dialog) -> None:
        asked.append(dialog.message)
        dialog.accept("removed the collection by hand")

    page.once("dialog", answer)
    rows.nth(0).locator("button.resolve").click()
    expect(status.locator(".state")).to_have_text("resolved")
    expect(status.locator(".resolved")).to_contain_text("by Ada")
    expect(status.locator(".resolved")).to_contain_text("removed the collection by hand")
    expect(rows.nth(0).locator("button.resolve")).to_have_count(0)
    expect(page.locator(".timeline h1 .state")).to_have_text("rolled back")
    page.screenshot(path=tmp_path / "timeline-resolved.png", full_page=True)
    assert asked == [
        f"Resolve step #1 MKCOL {tls_upstream.base_url}/dav/{session_id}: "
        "how was it undone by hand? (recorded with your name)"
    ]

    step = next(s for s in up.api("GET", f"/api/sessions/{session_id}").json()["steps"])
    assert step["id"] == step_id
    assert step["resolved"]["by"] == "Ada"  # the signed-in name, not a name the page sends


def test_freezing_everything_from_the_header_after_confirming(
    page: Page, up: Undoproxy, tls_upstream: ThreadedServer, tmp_path: Path
) -> None:
    marker = uuid.uuid4().hex
    url = f"{tls_upstream.base_url}/page-all/{marker}"
    expect(page.locator("#freeze-all")).to_have_text("Freeze all")
    expect(page.locator("#frozen-all")).to_be_hidden()
    dialogs: list[str] = []
    page.once("dialog", lambda d: (dialogs.append(d.message), d.accept()))
    page.click("#freeze-all")
    expect(page.locator("#frozen-all")).to_be_visible()
    expect(page.locator("#freeze-all")).to_have_text("Unfreeze all")
    assert dialogs[0].startswith("Freeze every session?")
    page.screenshot(path=tmp_path / "header-frozen.png", full_page=True)
    try:
        for session in ("x1", "x2"):
            with up.agent(session) as agent:
                refused = agent.post(url, json={})
            assert refused.status_code == 403 and refused.json()["scope"] == "all"
        assert _writes(tls_upstream, marker) == []
        # Another tab sees it too, when it loads (and live, from the event stream).
        page.reload()
        expect(page.locator("#frozen-all")).to_be_visible()
    finally:
        page.once("dialog", lambda d: d.accept())
        page.click("#freeze-all")
        expect(page.locator("#freeze-all")).to_have_text("Freeze all")
        expect(page.locator("#frozen-all")).to_be_hidden()
    assert up.api("GET", "/api/info").json()["frozen_all"] is False
    with up.agent("x1") as agent:
        assert agent.post(url, json={}).status_code == 200
