"""Rollback overlaps a step's verification read with the next compensation only where that
cannot change what is read, and never sends two compensations at once (LIFO holds).

The upstream answers slowly and records, for every request, what else was in flight.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from aiohttp import web

from tests.rollback.helpers import rollback_ends, statuses
from tests.support.certs import server_context
from tests.support.proc import Undoproxy
from tests.support.servers import ThreadedServer
from undoproxy.rollback.overlap import independent


@dataclass
class Seen:
    items: dict[str, bytes] = field(default_factory=dict)
    in_flight: list[tuple[str, str]] = field(default_factory=list)
    log: list[tuple[str, str, tuple[tuple[str, str], ...]]] = field(default_factory=list)
    ids: Iterator[int] = field(default_factory=itertools.count)


def app(seen: Seen) -> web.Application:
    async def handle(request: web.Request) -> web.Response:
        me = (request.method, request.path)
        seen.log.append((*me, tuple(seen.in_flight)))  # what was in flight when this came
        seen.in_flight.append(me)
        try:
            await asyncio.sleep(0.02)  # slow enough for requests to meet
            return await answer(request)
        finally:
            seen.in_flight.remove(me)

    async def answer(request: web.Request) -> web.Response:
        if request.method == "POST":
            path = f"{request.path.rstrip('/')}/{next(seen.ids)}"
            seen.items[path] = await request.read()
            return web.json_response({"ok": True}, status=201, headers={"Location": path})
        if request.method == "DELETE":
            return web.Response(status=204 if seen.items.pop(request.path, None) else 404)
        if request.path in seen.items:
            return web.Response(body=seen.items[request.path], content_type="application/json")
        return web.Response(status=404)

    application = web.Application()
    application.router.add_route("*", "/{tail:.*}", handle)
    return application


@pytest.fixture
def seen() -> Seen:
    return Seen()


@pytest.fixture
def server(seen: Seen, upstream_cert: tuple[Path, Path]) -> Iterator[ThreadedServer]:
    s = ThreadedServer(app(seen), ssl_context=server_context(upstream_cert)).start()
    yield s
    s.stop()


RULES = {
    "rules": [
        {"name": "create", "match": {"method": "POST"}, "compensate": "delete-created"},
    ]
}


@pytest.fixture(scope="module")
def proxy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Undoproxy]:
    instance = Undoproxy(tmp_path_factory.mktemp("overlap"), RULES).start()
    yield instance
    instance.stop()


def create(proxy: Undoproxy, server: ThreadedServer, session: str, paths: list[str]) -> None:
    with proxy.agent(session) as agent:
        for path in paths:
            r = agent.post(f"{server.base_url}{path}", json={"n": 1})
            assert r.status_code == 201, r.text


def deletes(seen: Seen) -> list[tuple[str, str, tuple[tuple[str, str], ...]]]:
    return [entry for entry in seen.log if entry[0] == "DELETE"]


def test_independent_resources_overlap_reads_but_never_two_compensations(
    proxy: Undoproxy, server: ThreadedServer, seen: Seen, session_id: str
) -> None:
    create(proxy, server, session_id, ["/items"] * 12)
    created = list(seen.items)
    rollback_ends(proxy, session_id, "rolled_back", ["compensated"] * 12)
    assert seen.items == {}
    sent = deletes(seen)
    assert [path for _, path, _ in sent] == list(reversed(created))  # LIFO
    # No compensation was sent while another one was in flight...
    assert all(not any(m == "DELETE" for m, _ in during) for _, _, during in sent)
    # ...but a read and a compensation were: an earlier step's read-back overlapped one.
    met = [{method, *(m for m, _ in during)} for method, _, during in seen.log]
    assert {"GET", "DELETE"} in met


def test_nested_resources_never_overlap(
    proxy: Undoproxy, server: ThreadedServer, seen: Seen, session_id: str
) -> None:
    # Each POST creates inside what the one before created: /a/0, /a/0/1, /a/0/1/2 ...
    path = "/a"
    for _ in range(5):
        create(proxy, server, session_id, [path])
        path = list(seen.items)[-1]
    report = proxy.rollback(session_id)
    assert statuses(report) == ["compensated"] * 5
    for _, _, during in seen.log[-10:]:  # the rollback's DELETEs and read-backs
        assert during == ()  # each alone: the next waited for the read of the one before


def test_what_counts_as_independent() -> None:
    a = frozenset({"https://h/items/7"})
    assert independent(a, frozenset({"https://h/items/8"}))
    assert independent(a, frozenset({"https://other/items/7"}))
    assert not independent(a, frozenset({"https://h/items/7/"}))
    assert not independent(a, frozenset({"https://h/items"}))  # the collection holds it
    assert not independent(frozenset({"https://h/items"}), a)
    assert not independent(a, frozenset({"https://H/items/7/comments/1"}))


def test_a_read_back_waits_for_the_next_compensation_to_go_out(
    proxy: Undoproxy, server: ThreadedServer, seen: Seen, session_id: str
) -> None:
    """The compensations are the critical path: the upstream gets DELETE n-1 before the read
    of n, so it never makes a compensation queue behind a read."""
    create(proxy, server, session_id, ["/items"] * 8)
    created = list(reversed(seen.items))  # in the order the rollback undoes them
    start = len(seen.log)
    rollback_ends(proxy, session_id, "rolled_back", ["compensated"] * 8)
    order = [(method, path) for method, path, _ in seen.log[start:]]
    for newer, older in itertools.pairwise(created):
        assert order.index(("DELETE", older)) < order.index(("GET", newer)), order
