"""A failed snapshot never lets a write go on unseen: `on_snapshot_error: proceed` makes it go
on irreversible, but not past `defaults.mutations: hold-irreversible` (it would have been held
had its irreversibility been known), and a signed request is no exception (tests/rollback/
test_s3.py). Through a real undoproxy, to an upstream whose reads fail."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from tests.conftest import received
from tests.support.proc import Undoproxy
from tests.support.servers import ThreadedServer

PROCEED = [
    {
        "name": "proceed",
        "match": {"method": "PUT", "path": "/failing/**"},
        "compensate": "restore",
        "on_snapshot_error": "proceed",
    }
]


@pytest.fixture(scope="module", params=["log", "hold-irreversible"])
def up(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Undoproxy]:
    config = {"rules": PROCEED, "defaults": {"mutations": request.param}}
    instance = Undoproxy(tmp_path_factory.mktemp(f"snap-{request.param}"), config).start()
    yield instance
    instance.stop()


def test_a_failed_snapshot_goes_on_only_where_nothing_would_have_held_it(
    up: Undoproxy, plain_upstream: ThreadedServer, session_id: str, request: pytest.FixtureRequest
) -> None:
    path = f"/failing/{uuid.uuid4().hex}"
    # the snapshot GET of this URL answers 503 (so does the PUT, if it is forwarded)
    r = up.agent(session_id).put(f"{plain_upstream.base_url}{path}?status=503", json={"a": 1})
    puts = [x for x in received(plain_upstream) if x.path.startswith(path) and x.method == "PUT"]
    if request.node.callspec.params["up"] == "log":
        assert len(puts) == 1 and r.status_code == 503  # forwarded, irreversible
        [step] = up.steps(session_id)
        assert step["status"] == "failed"
    else:
        assert puts == [] and r.status_code == 502, r.text  # refused, nothing forwarded
        assert r.json()["error"] == "undoproxy_snapshot_failed"
