"""Finding 7 through a real undoproxy: one approval covers only byte-identical requests, and the
card shows what will be sent (headers, secrets hidden, method overrides called out)."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import FIRST_COMPLETED, Future, wait
from typing import Any
from urllib.parse import urlsplit

import pytest
import requests

from tests.conftest import received
from tests.support.holding import approvals, decide, in_thread
from tests.support.proc import Undoproxy
from tests.support.servers import ThreadedServer

RULES: list[dict[str, Any]] = [
    {
        "name": "hold-group",
        "match": {"host": "127.0.0.1", "method": ["POST", "DELETE"], "path": "/grp/**"},
        "action": "hold",
        "risk": "high",
    }
]


@pytest.fixture(scope="module")
def up(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Undoproxy]:
    config = {"approvals": {"timeout": "60s"}, "rules": RULES}
    instance = Undoproxy(tmp_path_factory.mktemp("held-requests"), config).start()
    yield instance
    instance.stop()


def send(up: Undoproxy, session: str, method: str, url: str, **headers: str) -> Future[Any]:
    """One agent request in the background (its own connection)."""
    return in_thread(lambda: up.agent(session, headers=headers).request(method, url, timeout=60))


def pending(up: Undoproxy, session: str, requests_waiting: int) -> list[dict[str, Any]]:
    """The session's pending approvals, once `requests_waiting` requests wait on them in all."""
    found: list[dict[str, Any]] = []
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        found = approvals(up, state="pending", session=session)
        if sum(len(a["step_ids"]) for a in found) >= requests_waiting:
            return found
        time.sleep(0.05)
    raise AssertionError(f"{requests_waiting} held requests did not arrive: {found}")


def wait_any(futures: list[Future[Any]]) -> set[Future[Any]]:
    """The futures done once the first one is (every request here gives up after 60 s)."""
    return wait(futures, timeout=30, return_when=FIRST_COMPLETED).done


def deny_all(up: Undoproxy, found: list[dict[str, Any]], futures: list[Future[Any]]) -> None:
    for approval in found:
        assert decide(up, approval["id"], "deny").status_code == 200
    assert [f.result(20).status_code for f in futures] == [403] * len(futures)


def test_requests_differing_only_in_authorization_get_one_approval_each(
    up: Undoproxy, plain_upstream: ThreadedServer, session_id: str
) -> None:
    url = f"{plain_upstream.base_url}/grp/{uuid.uuid4().hex}"
    keys = ["Bearer sk-alice-1111", "Bearer sk-mallory-2222"]
    futures = [send(up, session_id, "DELETE", url, Authorization=k) for k in keys]
    found = pending(up, session_id, 2)
    assert len(found) == 2 and all(len(a["step_ids"]) == 1 for a in found)
    shown = [{h["name"]: h for h in a["headers"]}["Authorization"] for a in found]
    assert all(h["secret"] and h["value"].startswith("[redacted] · ") for h in shown)
    assert shown[0]["value"] != shown[1]["value"]  # told apart, neither revealed
    assert "sk-alice" not in json.dumps(found) and "sk-mallory" not in json.dumps(found)

    # Approving one forwards exactly one request, with its own credential; the other waits.
    assert decide(up, found[0]["id"], "approve").status_code == 200
    first_done = next(iter(wait_any(futures)))
    assert first_done.result().status_code == 200
    path = urlsplit(url).path
    deletes = [r for r in received(plain_upstream) if r.method == "DELETE" and r.path == path]
    assert len(deletes) == 1
    assert deletes[0].headers["Authorization"] == keys[futures.index(first_done)]
    assert up.api("GET", f"/api/approvals/{found[1]['id']}").json()["state"] == "pending"
    assert decide(up, found[1]["id"], "deny").status_code == 200
    assert sorted(f.result(20).status_code for f in futures) == [200, 403]


def test_a_method_override_gets_its_own_approval_and_is_called_out(
    up: Undoproxy, plain_upstream: ThreadedServer, session_id: str
) -> None:
    url = f"{plain_upstream.base_url}/grp/{uuid.uuid4().hex}"
    plain = send(up, session_id, "POST", url)
    pending(up, session_id, 1)
    override = send(up, session_id, "POST", url, **{"X-HTTP-Method-Override": "DELETE"})
    found = pending(up, session_id, 2)
    assert len(found) == 2
    (marked,) = [a for a in found if a["method_overrides"]]
    assert marked["method_overrides"] == [
        {"where": "header X-HTTP-Method-Override", "method": "DELETE"}
    ]
    assert {"name": "X-HTTP-Method-Override", "value": "DELETE", "secret": False,
            "override": True} in marked["headers"]  # fmt: skip
    (unmarked,) = [a for a in found if not a["method_overrides"]]
    assert not any(h["override"] for h in unmarked["headers"])

    # The page's card shows it prominently.
    key = requests.post(
        f"{up.admin_url}/api/signin",
        json={"name": "Ada"},
        headers={"Authorization": f"Bearer {up.token}"},
        timeout=10,
    ).json()["key"]
    page = requests.get(
        f"{up.admin_url}/?partial=1", headers={"Authorization": f"Bearer {key}"}, timeout=10
    ).text
    card = page[page.index(f'id="approval-{marked["id"]}"') :]
    card = card[: card.index("</article>")]
    assert 'class="override" role="alert"' in card
    assert "asks the server to act as <strong>DELETE</strong>" in card
    assert "X-HTTP-Method-Override" in card
    other = page[page.index(f'id="approval-{unmarked["id"]}"') :]
    assert 'class="override"' not in other[: other.index("</article>")]
    deny_all(up, found, [plain, override])


def test_byte_identical_requests_still_share_one_approval(
    up: Undoproxy, plain_upstream: ThreadedServer, session_id: str
) -> None:
    url = f"{plain_upstream.base_url}/grp/{uuid.uuid4().hex}"
    futures = [send(up, session_id, "DELETE", url, Authorization="Bearer sk-same") for _ in "ab"]
    found = pending(up, session_id, 2)
    assert len(found) == 1 and len(found[0]["step_ids"]) == 2
    deny_all(up, found, futures)
