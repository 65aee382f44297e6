"""`undoproxy doctor` against a real undoproxy: probes that go through are ok; a client that
goes around (aiohttp without trust_env, a raw socket) or does not trust the CA is named,
with its fix, and doctor exits 1."""

from __future__ import annotations

import textwrap

from tests.runtimes.conftest import PYTHON, NetnsHost, NetnsUpstream, need
from tests.support.proc import Undoproxy


def _canary(host: NetnsHost) -> tuple[str, str]:
    # The canary listens on this run's own test network (the machine's end of its veth):
    # never on an address of the machine's real network.
    return ("--canary-host", host.peer)


def test_the_built_in_probes_all_go_through(rt_proxy: Undoproxy, netns_host: NetnsHost) -> None:
    need("curl")
    done = rt_proxy.cli("doctor", *_canary(netns_host), "--session", "doctor-probes", timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    for name in ("curl", "python urllib"):
        assert any(ln.split()[:1] == ["ok"] and name in ln for ln in lines), done.stdout
    assert "no client went around undoproxy" in done.stdout


def test_a_command_that_goes_through_is_ok(rt_proxy: Undoproxy, netns_host: NetnsHost) -> None:
    code = "import requests, sys; requests.get(sys.argv[1])"
    done = rt_proxy.cli("doctor", *_canary(netns_host), "--", PYTHON, "-c", code, "{canary}")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "ok      canary request" in done.stdout


def test_aiohttp_without_trust_env_is_named_as_a_bypass(
    rt_proxy: Undoproxy, netns_host: NetnsHost
) -> None:
    code = textwrap.dedent("""
        import asyncio, os, aiohttp
        async def main():
            async with aiohttp.ClientSession() as s:  # no trust_env: ignores HTTPS_PROXY
                try:
                    await s.get(os.environ["UNDOPROXY_CANARY_URL"])
                except aiohttp.ClientError:
                    pass
        asyncio.run(main())
    """)
    done = rt_proxy.cli("doctor", *_canary(netns_host), "--", PYTHON, "-c", code)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "BYPASS  canary request  went around undoproxy" in done.stdout
    assert "trust_env=True" in done.stdout  # the fix for that runtime


def test_a_client_that_does_not_trust_the_ca_is_named(
    rt_proxy: Undoproxy, netns_host: NetnsHost
) -> None:
    code = "import os, urllib.request as r; r.urlopen(os.environ['UNDOPROXY_CANARY_URL'])"
    done = rt_proxy.cli(
        "doctor", *_canary(netns_host), "--", "env", "-u", "SSL_CERT_FILE", PYTHON, "-c", code
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert "TRUST" in done.stdout and "does not trust undoproxy's CA" in done.stdout
    assert "SSL_CERT_FILE" in done.stdout


def test_a_direct_connection_to_any_host_is_named(
    rt_proxy: Undoproxy, remote_upstream: NetnsUpstream, netns_host: NetnsHost
) -> None:
    """A raw socket to the test host (a network namespace of this run's own, so a
    non-loopback address) is named with its address and port."""
    host, port = remote_upstream.host, remote_upstream.port
    code = (
        f"import socket, time; s = socket.create_connection(({host!r}, {port})); "
        "time.sleep(0.5); s.close()"
    )
    done = rt_proxy.cli("doctor", *_canary(netns_host), "--", PYTHON, "-c", code)
    assert done.returncode == 1, done.stdout + done.stderr
    assert f"BYPASS  {host}:{port}" in done.stdout
