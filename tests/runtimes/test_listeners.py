"""SessionListeners with a stand-in for mitmproxy's server manager: ports are kept per session,
saved privately, reopened on restore, and at the limit closed sessions give theirs up."""

from __future__ import annotations

import json
import stat
from collections.abc import Iterable
from pathlib import Path

import pytest
from mitmproxy.proxy import mode_specs

from undoproxy.runtimes import listeners
from undoproxy.runtimes.listeners import ListenerError, SessionListeners


class Running:
    is_running = True


class FakeServers:
    """What mitmproxy's Proxyserver.servers offers: update(modes) and lookup by mode."""

    def __init__(self) -> None:
        self.modes: list[mode_specs.ProxyMode] = []

    async def update(self, modes: Iterable[mode_specs.ProxyMode]) -> bool:
        self.modes = list(modes)
        return True

    def __getitem__(self, mode: mode_specs.ProxyMode) -> Running:
        if mode not in self.modes:
            raise KeyError(mode)
        return Running()


class FakeProxyserver:
    def __init__(self) -> None:
        self.servers = FakeServers()


def _listeners(state_dir: Path, server: FakeProxyserver) -> SessionListeners:
    return SessionListeners(server, "127.0.0.1", state_dir, base_modes=lambda: ["regular"])


async def test_ports_are_per_session_saved_and_restored(tmp_path: Path) -> None:
    server = FakeProxyserver()
    ports = _listeners(tmp_path, server)
    a = await ports.open("a")
    assert await ports.open("a") == a
    b = await ports.open("b")
    assert a != b and ports.session_for(a) == "a" and ports.session_for(b) == "b"
    assert ports.session_for(1) is None
    assert [m.full_spec for m in server.servers.modes] == [
        "regular",
        *(f"regular@127.0.0.1:{p}" for p in sorted((a, b))),
    ]
    saved = tmp_path / listeners.PORTS_FILE
    assert json.loads(saved.read_text()) == {"a": a, "b": b}
    assert stat.S_IMODE(saved.stat().st_mode) == 0o600

    again = _listeners(tmp_path, FakeProxyserver())
    await again.restore()
    assert again.session_for(a) == "a" and again.port_of("b") == b


async def test_at_the_limit_closed_sessions_give_up_their_ports(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(listeners, "MAX_LISTENERS", 2)
    ports = _listeners(tmp_path, FakeProxyserver())
    old = await ports.open("done")
    await ports.open("busy")
    with pytest.raises(ListenerError):
        await ports.open("new", closed=lambda s: False)
    new = await ports.open("new", closed=lambda s: s == "done")
    assert ports.session_for(old) is None and ports.session_for(new) == "new"
    assert ports.port_of("busy") is not None
