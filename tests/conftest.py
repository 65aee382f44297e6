"""Fixtures: real upstreams on 127.0.0.1 (TLS with a self-signed cert, and plain HTTP) and a
real `undoproxy run` process in front of them.

Parallel runs (`make test`: pytest-xdist, `-n 3 --dist loadfile`): every test file runs on
one worker, so a module's shared `undoproxy run` starts once; the files that drive Docker
(DOCKER_FILES) are one unit together, so that two image builds and two Compose projects never
compete for the 2 cores. Session-scoped fixtures (`proxy`, `pg_cluster`, the
network namespace) run once per worker, on ports the kernel picks and in per-worker temp dirs.
A test file that starts `undoproxy run` is marked `slow` (`-m "not slow"`: the pure tests).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support import postgres, upstream
from tests.support.certs import self_signed, server_context
from tests.support.ci import skip_or_fail
from tests.support.proc import Undoproxy
from tests.support.servers import ThreadedServer

DOCKER_FILES = frozenset(
    {"tests/test_container.py", "tests/test_deploy_compose.py", "tests/test_deploy_kubernetes.py"}
)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """`--dist loadfile`, with the files that drive Docker as one unit (one worker, in turn).

    (Not `--dist loadgroup`: it renames node ids, which pytest 9 no longer lets it do.)"""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class ByFileDockerTogether(LoadScopeScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            return "docker" if path in DOCKER_FILES else path

    return ByFileDockerTogether(config, log)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark the tests of a file that starts `undoproxy run` slow."""
    for item in items:
        module = getattr(item, "module", None)
        if module is not None and (
            getattr(module, "Undoproxy", None) is Undoproxy or "proxy" in item.fixturenames
        ):
            item.add_marker(pytest.mark.slow)


@pytest.fixture(scope="session")
def upstream_cert(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return self_signed(tmp_path_factory.mktemp("upstream-cert"))


@pytest.fixture(scope="session")
def tls_upstream(upstream_cert: tuple[Path, Path]) -> Iterator[ThreadedServer]:
    ctx = server_context(upstream_cert)
    server = ThreadedServer(upstream.create_app(), ctx).start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def plain_upstream() -> Iterator[ThreadedServer]:
    server = ThreadedServer(upstream.create_app()).start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def proxy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Undoproxy]:
    """One undoproxy with the default config, shared by tests that use distinct sessions."""
    instance = Undoproxy(tmp_path_factory.mktemp("undoproxy")).start()
    yield instance
    instance.stop()


@pytest.fixture
def session_id() -> str:
    """A session id no other test uses."""
    return f"t-{uuid.uuid4().hex[:10]}"


def received(server: ThreadedServer) -> list[upstream.Received]:
    """What the upstream has received so far."""
    return server.app[upstream.RECEIVED]


@pytest.fixture(scope="session")
def pg_cluster() -> Iterator[postgres.Cluster]:
    """A throw-away PostgreSQL cluster for the whole run (tests/support/postgres.py)."""
    if postgres.bin_dir() is None:
        skip_or_fail("PostgreSQL is not installed (apt-get install postgresql)")
    cluster = postgres.Cluster().start()
    yield cluster
    cluster.stop()


@pytest.fixture
def pg_url(pg_cluster: postgres.Cluster) -> str:
    """The URL of a new, empty database of the test cluster."""
    return pg_cluster.database()
