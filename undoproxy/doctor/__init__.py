"""`undoproxy doctor`: run clients under the agent environment and name those that slip past.

How a bypass is seen: a TLS "canary" server listens on this machine (its own non-loopback
address when it has one, since Go, Ruby, axios and JVMs never proxy loopback; else 127.0.0.2,
which NO_PROXY does not name), one port per probe, with a certificate from a private CA that
nothing trusts. Each probe (or the given command, with `{canary}` in its arguments or
$UNDOPROXY_CANARY_URL) calls its canary URL. Then:

    a step with that URL is in undoproxy's journal     went through undoproxy        ok
    the canary saw a connection, the journal did not    went around undoproxy         BYPASS
    neither; undoproxy got a TLS alert from the client  does not trust undoproxy's CA TRUST
      in the session's tunnel to the canary (unknown ca, bad certificate)
    neither, otherwise                                  failed (its last words shown) FAILED

Every verdict comes from that evidence (a journal step, a connection, a TLS alert), never
from what the client printed: its output may quote anything, undoproxy's own error pages
included. Each problem is named once.

A client that goes around undoproxy meets the untrusted canary certificate and fails: nothing
is ever sent to the canary but a TLS handshake. For a command (`doctor -- CMD`), the
connections its processes open are also watched (Linux /proc): any that goes to another
address than undoproxy's is named, whatever host it was for, and so is every host whose
certificate from undoproxy it refused.
"""

from __future__ import annotations

import ipaddress
import secrets
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

from undoproxy.doctor.canary import Canary, canary_host, private_ca_context
from undoproxy.doctor.connections import remote_endpoints, tree
from undoproxy.doctor.probes import (
    BYPASS_FIXES,
    CANARY_ENV,
    GENERIC_BYPASS_FIX,
    GENERIC_TRUST_FIX,
    PROBES,
    TRUST_FIXES,
    Probe,
    runtime_of,
)
from undoproxy.errors import UndoproxyError

__all__ = ["CANARY_ENV", "PROBES", "CommandNotFound", "Doctor", "Finding", "report"]
JOURNAL_WAIT = 10.0  # seconds a request the canary saw may take to show in the journal
FAILURE_WAIT = 0.5  # seconds a client's TLS alert may take to be recorded by undoproxy


@dataclass
class Finding:
    """What one probe (or the command) did."""

    name: str
    verdict: str  # ok | BYPASS | TRUST | FAILED | skip
    detail: str
    fix: str = ""


class CommandNotFound(UndoproxyError):
    """`doctor -- CMD` could not start CMD (exit status 127, or 126, as a shell says)."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.exit_status = status


def _trust_finding(name: str, runtime: str, failure: dict[str, Any]) -> Finding:
    """What a failed handshake with undoproxy says about the client (its TLS alert)."""
    if failure["distrust"]:
        why = f"does not trust undoproxy's CA (its TLS alert: {failure['error']})"
        return Finding(name, "TRUST", why, TRUST_FIXES.get(runtime, GENERIC_TRUST_FIX))
    return Finding(name, "FAILED", f"its TLS handshake with undoproxy failed: {failure['error']}")


def _last_words(output: str) -> str:
    lines = [ln.strip() for ln in output.strip().splitlines() if ln.strip()]
    return lines[-1][:200] if lines else "no output"


@dataclass
class Doctor:
    """Runs probes or a command under `env` and judges each by the canary and the journal."""

    env: dict[str, str]
    steps: Callable[[], list[dict[str, Any]]]  # the session's steps, from the admin API
    proxy_ports: set[int]
    # The session's failed TLS handshakes with undoproxy (GET .../tls-failures).
    tls_failures: Callable[[], list[dict[str, Any]]] = list
    host: str = field(default_factory=canary_host)
    nonce: str = field(default_factory=lambda: secrets.token_hex(4))
    timeout: float = 60.0

    def __post_init__(self) -> None:
        self._dir = Path(tempfile.mkdtemp(prefix="undoproxy-doctor-"))
        self.context = private_ca_context(self.host, self._dir)

    def _judge(
        self, name: str, runtime: str, canary: Canary, path: str, rc: int, out: str, since: float
    ) -> Finding:
        if self._journaled(path, wait=JOURNAL_WAIT if canary.peers else 0.5):
            return Finding(name, "ok", "went through undoproxy into the session")
        if canary.peers:
            fix = BYPASS_FIXES.get(runtime, GENERIC_BYPASS_FIX)
            return Finding(name, "BYPASS", "went around undoproxy (the canary saw it)", fix)
        target = f"{canary.host}:{canary.port}"
        refused = [f for f in self._failures(since) if f["target"] == target]
        if refused:
            return _trust_finding(name, runtime, refused[-1])
        return Finding(name, "FAILED", f"exit {rc}: {_last_words(out)}")

    def _failures(self, since: float) -> list[dict[str, Any]]:
        """The session's failed handshakes with undoproxy since `since`."""
        return [f for f in self.tls_failures() if f["at"] >= since]

    def _journaled(self, path: str, wait: float) -> bool:
        """True once the session has a step for `path`. Reads are journaled in batches: the
        canary seeing a request is no bypass until the journal had time to show it."""
        deadline = time.monotonic() + wait
        while True:
            if any(path in s["url"] for s in self.steps()):
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.1)

    def probe(self, probe: Probe) -> Finding:
        """Run one probe against its own canary."""
        if shutil.which(probe.tool) is None:
            return Finding(probe.name, "skip", f"{probe.tool} not installed")
        if probe.check is not None and not _succeeds(probe.check()):
            return Finding(probe.name, "skip", f"cannot run here: {' '.join(probe.check())} failed")
        canary = Canary(self.host, self.context)
        since = time.time()
        path = f"/undoproxy-doctor/{self.nonce}/{quote(probe.name.replace(' ', '-'))}"
        try:
            work = Path(tempfile.mkdtemp(dir=self._dir))
            try:
                done = subprocess.run(
                    probe.argv(canary.url(path), work),
                    capture_output=True,
                    text=True,
                    env=self.env,
                    timeout=self.timeout,
                    stdin=subprocess.DEVNULL,
                    cwd=work,
                )
                rc, out = done.returncode, done.stdout + done.stderr
            except subprocess.TimeoutExpired:
                rc, out = -1, f"timed out after {self.timeout:.0f}s"
            return self._judge(probe.name, probe.runtime, canary, path, rc, out, since)
        finally:
            canary.close()

    def command(self, argv: Sequence[str]) -> tuple[list[Finding], int]:
        """Run the user's command once; its findings and its exit status."""
        canary = Canary(self.host, self.context)
        path = f"/undoproxy-doctor/{self.nonce}/command"
        url = canary.url(path)
        env = {**self.env, CANARY_ENV: url}
        seen: set[tuple[str, int]] = set()
        since = time.time()
        runtime = runtime_of(argv)
        try:
            try:
                proc = subprocess.Popen(
                    [a.replace("{canary}", url) for a in argv],
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    text=True,
                    env=env,
                )
            except FileNotFoundError:
                raise CommandNotFound(f"command not found: {argv[0]}", 127) from None
            except PermissionError:
                raise CommandNotFound(f"cannot run {argv[0]}: permission denied", 126) from None
            except OSError as exc:
                raise CommandNotFound(f"cannot run {argv[0]}: {exc.strerror or exc}", 126) from None
            output: list[str] = []
            reader = threading.Thread(target=lambda: output.extend(proc.stdout or []), daemon=True)
            reader.start()
            while proc.poll() is None:
                if sys.platform.startswith("linux"):
                    seen |= remote_endpoints(tree(proc.pid))
                time.sleep(0.02)
            reader.join(5)
            out = "".join(output)
            findings: list[Finding] = []
            used = any("{canary}" in a for a in argv) or canary.peers
            if used or any(path in s["url"] for s in self.steps()):
                findings.append(
                    self._judge(
                        "canary request", runtime, canary, path, proc.returncode, out, since
                    )
                )
            # Loopback is NO_PROXY by design (undoproxy itself, local services).
            direct = sorted((h, p) for h, p in seen if not ipaddress.ip_address(h).is_loopback)
            for h, p in direct:
                if (h, p) == (self.host, canary.port):
                    continue  # judged above, by the canary and the journal
                fix = BYPASS_FIXES.get(runtime, GENERIC_BYPASS_FIX)
                findings.append(
                    Finding(f"{h}:{p}", "BYPASS", "a direct connection, not through undoproxy", fix)
                )
            canary_target = f"{canary.host}:{canary.port}"
            if not findings:
                time.sleep(
                    FAILURE_WAIT
                )  # undoproxy records a TLS alert just after the client sent it
            refused = {f["target"]: f for f in self._failures(since)}  # the last one per host
            for target, failure in refused.items():
                if target != canary_target or not used:
                    findings.append(_trust_finding(target, runtime, failure))
            if not findings:
                findings.append(
                    Finding(
                        "command",
                        "ok",
                        f"exit {proc.returncode}; no connection went around undoproxy",
                    )
                )
            sys.stdout.write(out)
            return once(findings), proc.returncode
        finally:
            canary.close()

    def close(self) -> None:
        """Remove the canary's files."""
        shutil.rmtree(self._dir, ignore_errors=True)


def once(findings: list[Finding]) -> list[Finding]:
    """Each problem once: findings with the same verdict and name are one."""
    return list({(f.verdict, f.name): f for f in findings}.values())


def _succeeds(argv: list[str]) -> bool:
    try:
        return subprocess.run(argv, capture_output=True, timeout=60).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def report(findings: list[Finding]) -> str:
    """The findings as the aligned lines `doctor` prints."""
    width = max((len(f.name) for f in findings), default=0)
    lines = []
    for f in findings:
        lines.append(f"  {f.verdict:<7} {f.name:<{width}}  {f.detail}")
        if f.fix:
            lines.append(f"  {'':<7} {'':<{width}}  fix: {f.fix}")
    return "\n".join(lines)
