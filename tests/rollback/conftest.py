"""Fixtures: the misbehaving object store, and an undoproxy with no rules in front of it."""

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
