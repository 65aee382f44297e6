"""`undoproxy doctor`: run clients under the agent environment and name those that slip past.

How a bypass is seen: a TLS "canary" server listens on this machine (its own non-loopback
address when it has one, since Go, Ruby, axios and JVMs never proxy loopback; else 127.0.0.2,
which NO_PROXY does not name), one port per probe, with a certificate from a private CA that
nothing trusts. Each probe (or the given command, with `{canary}` in its arguments or
$UNDOPROXY_CANARY_URL) calls its canary URL. Then:

    a step with that URL is in undoproxy's journal    went through undoproxy        ok
    the canary saw a connection, the journal did not   went around undoproxy         BYPASS
    neither, and the client reported a TLS failure     does not trust undoproxy's CA TRUST
    neither, otherwise                                 failed (its last words shown) FAILED

A client that goes around undoproxy meets the untrusted canary certificate and fails: nothing
is ever sent to the canary but a TLS handshake. For a command (`doctor -- CMD`), the
connections its processes open are also watched (Linux /proc): any that goes to another
address than undoproxy's is named, whatever host it was for.
"""

from __future__ import annotations

import ipaddress
import re
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
    PROBES,
    TRUST_FAILURES,
    Probe,
    runtime_of,
)

__all__ = ["CANARY_ENV", "PROBES", "Doctor", "Finding", "report"]
JOURNAL_WAIT = 10.0  # seconds a request the canary saw may take to show in the journal


@dataclass
class Finding:
    """What one probe (or the command) did."""

    name: str
    verdict: str  # ok | BYPASS | TRUST | FAILED | skip
    detail: str
    fix: str = ""


def _trust_failure(output: str) -> tuple[str, str] | None:
    for pattern, runtime, fix in TRUST_FAILURES:
        if re.search(pattern, output):
            return runtime, fix
    return None


def _last_words(output: str) -> str:
    lines = [ln.strip() for ln in output.strip().splitlines() if ln.strip()]
    return lines[-1][:200] if lines else "no output"


@dataclass
class Doctor:
    """Runs probes or a command under `env` and judges each by the canary and the journal."""

    env: dict[str, str]
    steps: Callable[[], list[dict[str, Any]]]  # the session's steps, from the admin API
    proxy_ports: set[int]
    host: str = field(default_factory=canary_host)
    nonce: str = field(default_factory=lambda: secrets.token_hex(4))
    timeout: float = 60.0

    def __post_init__(self) -> None:
        self._dir = Path(tempfile.mkdtemp(prefix="undoproxy-doctor-"))
        self.context = private_ca_context(self.host, self._dir)

    def _judge(
        self, name: str, runtime: str, canary: Canary, path: str, rc: int, out: str
    ) -> Finding:
        if self._journaled(path, wait=JOURNAL_WAIT if canary.peers else 0.5):
            return Finding(name, "ok", "went through undoproxy into the session")
        if canary.peers:
            fix = BYPASS_FIXES.get(runtime, GENERIC_BYPASS_FIX)
            return Finding(name, "BYPASS", "went around undoproxy (the canary saw it)", fix)
        trust = _trust_failure(out)
        if trust is not None:
            return Finding(
                name, "TRUST", f"does not trust undoproxy's CA: {_last_words(out)}", trust[1]
            )
        return Finding(name, "FAILED", f"exit {rc}: {_last_words(out)}")

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
        canary = Canary(self.host, self.context)
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
            if "No module named" in out:
                return Finding(probe.name, "skip", _last_words(out))
            return self._judge(probe.name, probe.runtime, canary, path, rc, out)
        finally:
            canary.close()

    def command(self, argv: Sequence[str]) -> tuple[list[Finding], int]:
        """Run the user's command once; its findings and its exit status."""
        canary = Canary(self.host, self.context)
        path = f"/undoproxy-doctor/{self.nonce}/command"
        url = canary.url(path)
        env = {**self.env, CANARY_ENV: url}
        seen: set[tuple[str, int]] = set()
        try:
            proc = subprocess.Popen(
                [a.replace("{canary}", url) for a in argv],
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                env=env,
            )
            output: list[str] = []
            reader = threading.Thread(target=lambda: output.extend(proc.stdout or []), daemon=True)
            reader.start()
            while proc.poll() is None:
                if sys.platform.startswith("linux"):
                    seen |= remote_endpoints(tree(proc.pid))
                time.sleep(0.02)
            reader.join(5)
            out = "".join(output)
            findings = []
            time.sleep(0.2)  # let undoproxy's journal writer catch up
            used = any("{canary}" in a for a in argv) or canary.peers
            if used or any(path in s["url"] for s in self.steps()):
                findings.append(
                    self._judge(
                        "canary request", runtime_of(argv), canary, path, proc.returncode, out
                    )
                )
            # Loopback is NO_PROXY by design (undoproxy itself, local services).
            direct = sorted((h, p) for h, p in seen if not ipaddress.ip_address(h).is_loopback)
            for h, p in direct:
                if (h, p) == (self.host, canary.port):
                    continue  # judged above, by the canary and the journal
                fix = BYPASS_FIXES.get(runtime_of(argv), GENERIC_BYPASS_FIX)
                findings.append(
                    Finding(f"{h}:{p}", "BYPASS", "a direct connection, not through undoproxy", fix)
                )
            trust = _trust_failure(out)
            if trust is not None and not any(f.verdict == "TRUST" for f in findings):
                why = f"does not trust undoproxy's CA: {_last_words(out)}"
                findings.append(Finding(trust[0], "TRUST", why, trust[1]))
            if not findings:
                findings.append(
                    Finding(
                        "command",
                        "ok",
                        f"exit {proc.returncode}; no connection went around undoproxy",
                    )
                )
            sys.stdout.write(out)
            return findings, proc.returncode
        finally:
            canary.close()

    def close(self) -> None:
        """Remove the canary's files."""
        shutil.rmtree(self._dir, ignore_errors=True)


def report(findings: list[Finding]) -> str:
    """The findings as the aligned lines `doctor` prints."""
    width = max((len(f.name) for f in findings), default=0)
    lines = []
    for f in findings:
        lines.append(f"  {f.verdict:<7} {f.name:<{width}}  {f.detail}")
        if f.fix:
            lines.append(f"  {'':<7} {'':<{width}}  fix: {f.fix}")
    return "\n".join(lines)
