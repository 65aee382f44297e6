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


def test_output_that_looks_like_a_tls_failure_is_no_evidence(
    rt_proxy: Undoproxy, netns_host: NetnsHost
) -> None:
    """A client that went through undoproxy is ok whatever it prints: undoproxy's own 502
    page, or a program's log, may quote any TLS error (here: Node's, Python's and curl's)."""
    code = (
        "import requests, sys; requests.get(sys.argv[1]); "
        "print('Error: SELF_SIGNED_CERT_IN_CHAIN; CERTIFICATE_VERIFY_FAILED; "
        "SSL certificate problem; x509: certificate signed by unknown authority')"
    )
    done = rt_proxy.cli("doctor", *_canary(netns_host), "--", PYTHON, "-c", code, "{canary}")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "ok      canary request" in done.stdout
    assert "TRUST" not in done.stdout and "fix:" not in done.stdout


def test_a_bypass_is_named_once_whatever_the_client_prints(
    rt_proxy: Undoproxy, netns_host: NetnsHost
) -> None:
    """aiohttp without trust_env goes straight to the canary, fails its handshake there and
    prints why (a certificate error): one problem, the bypass, with its fix."""
    code = textwrap.dedent("""
        import asyncio, os, aiohttp
        async def main():
            async with aiohttp.ClientSession() as s:
                try:
                    await s.get(os.environ["UNDOPROXY_CANARY_URL"])
                except aiohttp.ClientError as exc:
                    print("request failed:", exc)
        asyncio.run(main())
    """)
    done = rt_proxy.cli("doctor", *_canary(netns_host), "--", PYTHON, "-c", code)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "certificate verify failed" in done.stdout.lower()  # what the client printed
    verdicts = [
        ln.split()[0] for ln in done.stdout.splitlines() if ln.startswith("  ") and ln.split()
    ]
    problems = [v for v in verdicts if v in ("BYPASS", "TRUST", "FAILED")]
    assert problems == ["BYPASS"], done.stdout
    assert "1 problem(s)" in done.stdout


def test_a_trust_failure_is_told_by_the_tls_alert_undoproxy_received(
    rt_proxy: Undoproxy, netns_host: NetnsHost, session_id: str
) -> None:
    """The TRUST verdict's evidence is in undoproxy: the client's alert in its tunnel, kept
    per session (GET /api/sessions/{id}/tls-failures). The client prints nothing at all."""
    code = (
        "import os, urllib.request as r\n"
        "try: r.urlopen(os.environ['UNDOPROXY_CANARY_URL'])\n"
        "except Exception: pass\n"
    )
    done = rt_proxy.cli(
        "doctor", *_canary(netns_host), "--session", session_id,
        "--", "env", "-u", "SSL_CERT_FILE", PYTHON, "-c", code,
    )  # fmt: skip
    assert done.returncode == 1, done.stdout + done.stderr
    assert "TRUST" in done.stdout and "its TLS alert" in done.stdout, done.stdout
    assert "SSL_CERT_FILE" in done.stdout  # the fix for Python, named through `env -u`
    failures = rt_proxy.api("GET", f"/api/sessions/{session_id}/tls-failures").json()["failures"]
    assert failures and failures[-1]["distrust"] is True
    assert failures[-1]["target"].startswith(netns_host.peer + ":")


def test_an_unknown_command_is_one_line(rt_proxy: Undoproxy) -> None:
    done = rt_proxy.cli("doctor", "--", "no-such-command-x")
    assert done.returncode == 127
    assert done.stderr == "undoproxy: command not found: no-such-command-x\n"
    assert done.stdout == ""
