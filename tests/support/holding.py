"""Helpers for tests of held requests: agents in threads, waiting for approvals, a webhook
receiver that records what it is sent."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

import requests
from aiohttp import web

from tests.support.proc import Undoproxy

T = TypeVar("T")
_POOL = ThreadPoolExecutor(max_workers=16, thread_name_prefix="agent")


def in_thread(fn: Callable[[], T]) -> Future[T]:
    """Run a blocking call (an agent's held request) in the background."""
    return _POOL.submit(fn)


def approvals(
    proxy: Undoproxy, *, state: str | None = None, session: str | None = None
) -> list[dict[str, Any]]:
    """GET /api/approvals, filtered."""
    query = "&".join(f"{k}={v}" for k, v in (("state", state), ("session", session)) if v)
    r = proxy.api("GET", "/api/approvals" + (f"?{query}" if query else ""))
    assert r.status_code == 200, r.text
    return list(r.json()["approvals"])


def wait_pending(
    proxy: Undoproxy, session: str, *, requests_waiting: int = 1, timeout: float = 15
) -> dict[str, Any]:
    """The session's one pending approval, once `requests_waiting` requests wait on it."""
    deadline = time.monotonic() + timeout
    found: list[dict[str, Any]] = []
    while time.monotonic() < deadline:
        found = approvals(proxy, state="pending", session=session)
        if found and len(found[0]["step_ids"]) >= requests_waiting:
            return found[0]
        time.sleep(0.05)
    raise AssertionError(f"no pending approval for {session} in {timeout}s: {found}")


def wait_state(
    proxy: Undoproxy, approval_id: str, state: str, timeout: float = 15
) -> dict[str, Any]:
    """The approval, once it reached `state`."""
    deadline = time.monotonic() + timeout
    current: dict[str, Any] = {}
    while time.monotonic() < deadline:
        current = proxy.api("GET", f"/api/approvals/{approval_id}").json()
        if current.get("state") == state:
            return current
        time.sleep(0.05)
    raise AssertionError(f"approval {approval_id} is not {state}: {current}")


def decide(proxy: Undoproxy, approval_id: str, verdict: str, **body: Any) -> requests.Response:
    """POST /api/approvals/{id}/approve|deny with the admin token."""
    return proxy.api("POST", f"/api/approvals/{approval_id}/{verdict}", json=body)


def dead_url() -> str:
    """An http:// URL on which nothing listens."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/hook"


HOOKS: web.AppKey[list[dict[str, Any]]] = web.AppKey("hooks", list)


async def _record(request: web.Request) -> web.Response:
    request.app[HOOKS].append(await request.json())
    return web.json_response({"ok": True})


def webhook_app() -> web.Application:
    """A Slack-like webhook receiver; `app[HOOKS]` lists the JSON bodies it received."""
    app = web.Application()
    app[HOOKS] = []
    app.router.add_post("/hook", _record)
    return app


def until(
    check: Callable[[], T | None], *, timeout: float = 20, what: str = "", every: float = 0.05
) -> T:
    """Poll `check` every `every` seconds until it returns something truthy, and return that;
    AssertionError naming `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout:g}s: {what or check}")
        time.sleep(every)
