"""Fixtures: the misbehaving object store, and undoproxy in front of it with no rules (`up`)
or with rules that write their compensations out (`ruled`)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.rollback.helpers import TOKEN
from tests.support import objects
from tests.support.proc import Undoproxy
from tests.support.servers import ThreadedServer


@pytest.fixture
def store() -> objects.StoreState:
    return objects.StoreState(token=TOKEN)


@pytest.fixture
def server(store: objects.StoreState, upstream_cert: tuple[Path, Path]) -> Iterator[ThreadedServer]:
    s = objects.serve(store, upstream_cert)
    yield s
    s.stop()


@pytest.fixture(scope="package")
def up(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Undoproxy]:
    """undoproxy with no rules: every compensation is inferred from the traffic."""
    instance = Undoproxy(tmp_path_factory.mktemp("rollback-truth")).start()
    yield instance
    instance.stop()


@pytest.fixture(scope="package")
def ruled(
    tmp_path_factory: pytest.TempPathFactory, plain_upstream: ThreadedServer
) -> Iterator[Undoproxy]:
    """undoproxy with rules whose compensations are written out (templates, named)."""
    elsewhere = f"http://127.0.0.1:{plain_upstream.port}/echo/cancel"
    rules = {
        "rules": [
            {
                "name": "note-with-reason",
                "match": {"method": "POST", "path": "/o/"},
                "compensate": {
                    "method": "DELETE",
                    "url": "/o/${response.body.id}",
                    "headers": {"X-Reason": "${request.body.reason}"},
                },
            },
            {
                "name": "linked",
                "match": {"method": "PUT", "path": "/o/linked/{name}"},
                "compensate": {"method": "DELETE", "url": "${request.body.target}"},
            },
            {
                "name": "named-create",
                "match": {"method": "POST", "path": "/o/made/"},
                "compensate": "delete-created",
            },
            {
                "name": "job-elsewhere",
                "match": {"method": "POST", "path": "/v1/jobs"},
                "compensate": {"method": "POST", "url": elsewhere, "body": {"job": "x"}},
            },
        ]
    }
    instance = Undoproxy(tmp_path_factory.mktemp("rollback-rules"), rules).start()
    yield instance
    instance.stop()
