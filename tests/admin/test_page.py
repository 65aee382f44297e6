"""The admin page in a real browser (Debian's Chromium driven by Playwright) against a real
undoproxy in front of a real REST API: sign in, decide held requests live, read a session's
timeline and roll it back. Screenshots of every view are saved under each test's tmp dir."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.admin.browser import ARGS, CHROMIUM, PAGE_KEY, WAIT, require_chromium
from tests.support import rest
from tests.support.holding import in_thread
from tests.support.proc import Undoproxy
from tests.support.servers import ThreadedServer

require_chromium()

from playwright.sync_api import Browser, Page, expect, sync_playwright  # noqa: E402

RULES: list[dict[str, Any]] = [
    {
        "name": "hold-item-writes",
        "match": {"host": "127.0.0.1", "method": ["PUT", "DELETE"], "path": "/items/{id}"},
        "action": "hold",
        "risk": "high",
    }
]
expect.set_options(timeout=WAIT)


@pytest.fixture(scope="module")
def state() -> rest.RestState:
    return rest.RestState()


@pytest.fixture(scope="module")
def api(state: rest.RestState, upstream_cert: tuple[Path, Path]) -> Iterator[ThreadedServer]:
    server = rest.serve(state, upstream_cert)
    yield server
    server.stop()


@pytest.fixture(scope="module")
def up(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Undoproxy]:
    config = {"approvals": {"timeout": "60s"}, "rules": RULES}
    instance = Undoproxy(tmp_path_factory.mktemp("page"), config).start()
    yield instance
    instance.stop()


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with sync_playwright() as p:
        launched = p.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
        yield launched
        launched.close()


@pytest.fixture
def page(browser: Browser, up: Undoproxy, tmp_path: Path) -> Iterator[Page]:
    """A fresh browser context signed in as Ada (sign-in screenshot saved)."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    page.set_default_timeout(WAIT)
    page.goto(up.admin_url + "/")
    expect(page.locator("h1")).to_have_text("Sign in")
    page.fill("input[name=token]", up.token)
    page.fill("input[name=name]", "Ada")
    page.screenshot(path=tmp_path / "signin.png")
    page.click("button[type=submit]")
    expect(page.locator(".who strong")).to_have_text("Ada")
    expect(page.locator("#live")).to_have_text("live")  # the event stream is connected
    yield page
    context.close()


def test_a_held_update_appears_live_and_approving_it_completes_the_agent_request(
    page: Page,
    up: Undoproxy,
    api: ThreadedServer,
    state: rest.RestState,
    session_id: str,
    tmp_path: Path,
) -> None:
    state.items["7"] = {"id": "7", "name": "Ada", "tier": "gold"}
    up.api("POST", "/api/sessions", json={"id": session_id, "intent": "fix a customer's name"})
    url = f"{api.base_url}/items/7"
    held = in_thread(
        lambda: up.agent(session_id).put(
            url, json={"id": "7", "name": "Ada L.", "tier": "gold"}, timeout=60
        )
    )
    card = page.locator(".card", has_text=session_id)
    expect(card).to_be_visible()  # arrived over /api/events: no reload
    expect(card.locator(".url")).to_have_text(url)
    expect(card).to_contain_text("fix a customer's name")
    expect(card.locator(".badge-destructive")).to_be_visible()
    expect(card.locator(".diff .d-del")).to_have_text('-   "name": "Ada",')
    expect(card.locator(".diff .d-add")).to_have_text('+   "name": "Ada L.",')
    expect(card.locator(".countdown")).to_contain_text("in ")
    page.screenshot(path=tmp_path / "queue.png", full_page=True)

    card.locator("button.approve").click()
    response = held.result(20)
    assert response.status_code == 200 and response.json()["name"] == "Ada L."
    assert state.items["7"]["name"] == "Ada L."
    expect(card).to_have_count(0)
    row = page.locator("#decided tr", has_text=session_id)
    expect(row.locator(".state")).to_have_text("approved")
    expect(row).to_contain_text("Ada")
    page.screenshot(path=tmp_path / "queue-decided.png", full_page=True)


def test_deny_with_a_reason_gives_the_agent_403(
    page: Page, up: Undoproxy, api: ThreadedServer, state: rest.RestState, session_id: str
) -> None:
    state.items["8"] = {"id": "8", "name": "Grace"}
    held = in_thread(lambda: up.agent(session_id).delete(f"{api.base_url}/items/8", timeout=60))
    card = page.locator(".card", has_text=session_id)
    # What the DELETE would remove, read from the target while it waits (its snapshot).
    expect(card.locator(".diff-head")).to_contain_text("deleted: every line below goes")
    expect(card.locator(".diff .d-del", has_text='"name": "Grace"')).to_be_visible()
    # The sessions list counts the held request.
    page.click("nav a[href='/sessions']")
    row = page.locator("#sessions tr", has_text=session_id)
    expect(row.locator("td").nth(5)).to_have_text("1")
    page.click("nav a[href='/']")
    card.locator(".reason").fill("Grace stays")
    card.locator("button.deny").click()
    response = held.result(20)
    assert response.status_code == 403
    assert response.json()["reason"] == "Grace stays"
    assert "8" in state.items
    expect(page.locator("#decided tr", has_text=session_id)).to_contain_text("Grace stays")


def test_the_sessions_list_counts_held_requests_live(
    page: Page, up: Undoproxy, api: ThreadedServer, state: rest.RestState, session_id: str
) -> None:
    state.items["9"] = {"id": "9", "name": "Hedy"}
    page.click("nav a[href='/sessions']")
    expect(page.locator("#sessions")).to_be_visible()
    held = in_thread(lambda: up.agent(session_id).delete(f"{api.base_url}/items/9", timeout=60))
    row = page.locator("#sessions tr", has_text=session_id)
    expect(row.locator("td").nth(5)).to_have_text("1")  # over /api/events: no reload
    [approval] = up.api("GET", f"/api/approvals?session={session_id}").json()["approvals"]
    up.api("POST", f"/api/approvals/{approval['id']}/deny", json={"reason": "not now"})
    assert held.result(20).status_code == 403
    expect(row.locator("td").nth(5)).to_have_text("")


def test_batch_deny_of_three_asks_for_confirmation(
    page: Page, up: Undoproxy, api: ThreadedServer, tmp_path: Path, session_id: str
) -> None:
    urls = [f"{api.base_url}/items/b{i}" for i in range(3)]
    futures = [in_thread(lambda u=u: up.agent(session_id).delete(u, timeout=60)) for u in urls]
    expect(page.locator(".card", has_text=session_id)).to_have_count(3)
    dialogs: list[str] = []
    page.once("dialog", lambda d: (dialogs.append(d.message), d.accept()))
    page.check("#select-all")
    page.fill("#batch-reason", "cleanup is not allowed today")
    page.screenshot(path=tmp_path / "queue-batch.png", full_page=True)
    page.click("button[data-batch=deny]")
    assert [f.result(20).status_code for f in futures] == [403, 403, 403]
    assert dialogs == ["Deny 3 held requests?"]
    expect(page.locator(".card", has_text=session_id)).to_have_count(0)


def test_sessions_timeline_and_rollback(
    page: Page,
    up: Undoproxy,
    api: ThreadedServer,
    state: rest.RestState,
    session_id: str,
    tmp_path: Path,
) -> None:
    state.items["9"] = {"id": "9", "name": "Linus", "tier": "silver"}
    before = state.snapshot()
    with up.agent(session_id) as s:
        created = s.post(f"{api.base_url}/items", json={"name": "Margaret"}, timeout=30).json()
        s.patch(f"{api.base_url}/items/9", json={"tier": "gold"}, timeout=30).raise_for_status()
        s.get(f"{api.base_url}/items/9", timeout=30).raise_for_status()
    assert created["id"] in state.items

    page.click("nav a[href='/sessions']")
    row = page.locator("#sessions tr", has_text=session_id)
    expect(row).to_contain_text("open")
    expect(row.locator("td.num").nth(0)).to_have_text("3")  # steps
    expect(row.locator("td.num").nth(1)).to_have_text("2")  # mutations
    page.screenshot(path=tmp_path / "sessions.png", full_page=True)

    row.locator("a").click()
    steps = page.locator("#timeline-steps tbody tr")
    expect(steps).to_have_count(3)
    expect(steps.nth(0)).to_contain_text("POST")
    expect(steps.nth(1)).to_contain_text("PATCH")
    expect(steps.nth(1)).to_contain_text("succeeded")
    expect(steps.nth(1).locator("td").nth(8)).to_contain_text("PUT")  # restore the snapshot
    page.screenshot(path=tmp_path / "timeline.png", full_page=True)

    page.once("dialog", lambda d: d.accept())
    page.click("#rollback")
    result = page.locator("#rollback-result")
    expect(result.locator("h2")).to_have_text("Rollback: rolled back")
    statuses = result.locator("tbody .state")
    expect(statuses).to_have_text(["compensated", "compensated"])
    expect(result.locator("tbody tr").nth(0)).to_contain_text("PATCH")  # newest first
    expect(page.locator(".timeline h1 .state")).to_have_text("rolled back")
    expect(page.locator("#rollback")).to_be_disabled()
    page.screenshot(path=tmp_path / "rollback.png", full_page=True)
    assert state.snapshot() == before


def test_a_method_override_is_called_out_and_credentials_are_hidden(
    page: Page,
    up: Undoproxy,
    api: ThreadedServer,
    state: rest.RestState,
    session_id: str,
    tmp_path: Path,
) -> None:
    state.items["o1"] = {"id": "o1", "name": "Ada"}
    headers = {"X-HTTP-Method-Override": "DELETE", "Authorization": "Bearer sk-page-secret"}
    held = in_thread(
        lambda: up.agent(session_id, headers=headers).put(
            f"{api.base_url}/items/o1", json={"id": "o1", "name": "Ada"}, timeout=60
        )
    )
    card = page.locator(".card", has_text=session_id)
    banner = card.locator("div.override")
    expect(banner).to_be_visible()
    expect(banner).to_contain_text("asks the server to act as DELETE")
    expect(card.locator("table.headers tr.override")).to_contain_text("X-HTTP-Method-Override")
    auth = card.locator("table.headers tr", has_text="Authorization")
    expect(auth.locator("td")).to_have_text(re.compile(r"^\[redacted\] · [0-9a-f]{8}$"))
    assert "sk-page-secret" not in page.content()
    page.screenshot(path=tmp_path / "queue-override.png", full_page=True)
    card.locator("button.deny").click()
    assert held.result(20).status_code == 403
    assert "o1" in state.items


def test_a_wrong_token_is_refused_and_signing_out_ends_the_page_key(
    browser: Browser, up: Undoproxy
) -> None:
    context = browser.new_context()
    page = context.new_page()
    page.set_default_timeout(WAIT)
    page.goto(up.admin_url + "/sessions")
    page.fill("input[name=token]", "not-the-admin-token")
    page.fill("input[name=name]", "Eve")
    page.click("button[type=submit]")
    expect(page.locator("#signin-error")).to_have_text("That is not the admin token.")
    assert page.evaluate(f"sessionStorage.getItem('{PAGE_KEY}')") is None

    page.fill("input[name=token]", up.token)
    page.click("button[type=submit]")
    expect(page.locator("#sessions")).to_be_visible()  # straight to the view asked for
    key = json.loads(page.evaluate(f"sessionStorage.getItem('{PAGE_KEY}')"))["key"]
    as_page = {"Authorization": f"Bearer {key}"}
    assert requests.get(f"{up.admin_url}/api/approvals", headers=as_page, timeout=10).ok

    page.click("#signout")
    expect(page.locator("h1")).to_have_text("Sign in")
    assert page.evaluate(f"sessionStorage.getItem('{PAGE_KEY}')") is None
    gone = requests.get(f"{up.admin_url}/api/approvals", headers=as_page, timeout=10)
    assert gone.status_code == 401
    assert context.cookies() == []
    context.close()
