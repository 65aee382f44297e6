"""`holds`: 500 requests held for approval at once while a pass-through load runs.

Goal: pass-through throughput with the 500 holds pending at least 0.95 of what it is with none
(held requests must cost nothing while they wait). undoproxy's RSS with the 500 holds is
printed. The held requests come from a separate load process (one HTTPS connection each, the
way 500 waiting agents would look); every round denies them all through the admin API and
checks that each agent got its 403.

Until approvals exist, a hold rule answers 403 at once: the benchmark then reports
"not available" instead of failing.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path
from typing import Any

import load
from harness import BrokenRun, NotAvailable, Undoproxy, Upstream
from load import LoadResult, LoadSpec
from paired import checked
from report import Row, median, ratio, rps, verdict

NAME = "holds"
HELD = 500
CONCURRENCY = 32
GOAL = 0.95
RULES: list[dict[str, Any]] = [
    {
        "name": "hold-held",
        "match": {"host": "127.0.0.1", "method": "POST", "path": "/held"},
        "action": "hold",
        "risk": "high",
        "timeout": "600s",
    }
]


def pending(undo: Undoproxy) -> list[dict[str, Any]]:
    """The pending approvals (NotAvailable when there is no approvals API)."""
    found = undo.api("GET", "/api/approvals?state=pending")
    items = found if isinstance(found, list) else found.get("approvals", [])
    return [a for a in items if a.get("state", "pending") == "pending"]


class HeldRequests:
    """HELD agents' requests waiting for a decision, from one background load process."""

    def __init__(self, undo: Undoproxy, upstream: Upstream) -> None:
        self.undo = undo
        spec = LoadSpec(
            url=upstream.https_url + "/held",
            method="POST",
            json_body=True,
            proxy=undo.proxy_url,
            session="bench-holds",
            cafile=undo.cafile,
            concurrency=HELD,
            count=HELD,
            timeout=900,
        )
        started = time.monotonic()
        self.child = load.start(spec)
        self.ids = self._wait_until_held()
        self.seconds = time.monotonic() - started

    def _wait_until_held(self) -> list[str]:
        deadline = time.monotonic() + 120
        found: list[dict[str, Any]] = []
        while time.monotonic() < deadline:
            if self.child.poll() is not None:
                result = load.finish(self.child)
                if result.count(403) == HELD:
                    raise NotAvailable("holds not implemented (a hold rule answers 403 at once)")
                raise BrokenRun(f"held requests ended early: {result}")
            try:
                found = pending(self.undo)
            except NotAvailable:
                self._abandon()
                raise
            if len(found) >= HELD:
                return [str(a["id"]) for a in found]
            time.sleep(0.25)
        self._abandon()
        raise BrokenRun(f"only {len(found)} of {HELD} requests were pending after 120s")

    def _abandon(self) -> None:
        self.child.kill()
        self.child.wait(10)

    def deny_all(self) -> LoadResult:
        """Deny every held request; each agent must get its 403."""
        for approval in self.ids:
            self.undo.api("POST", f"/api/approvals/{approval}/deny", {"reason": "bench cleanup"})
        try:
            result = load.finish(self.child, timeout=60)
        except subprocess.TimeoutExpired:
            self._abandon()
            raise BrokenRun("held requests were not answered after being denied") from None
        if result.count(403) != HELD or result.errors:
            raise BrokenRun(f"denied held requests got {result.statuses}, {result.errors} errors")
        return result


def run(workdir: Path, rounds: int, seconds: float) -> list[Row]:
    """Alternate rounds with and without 500 holds pending; report the ratio and the RSS."""
    with (
        Upstream(workdir / "upstream") as upstream,
        Undoproxy(workdir / "undoproxy", RULES) as undo,
    ):
        spec = LoadSpec(
            url=upstream.https_url + "/small",
            proxy=undo.proxy_url,
            session="bench-holds-load",
            cafile=undo.cafile,
            concurrency=CONCURRENCY,
            duration=seconds,
        )

        def passthrough(what: str) -> float:
            return checked(load.drive(spec), 200, f"{NAME} {what}").rps

        with_holds: list[float] = []
        without: list[float] = []
        rss_idle: list[float] = []
        rss_held: list[float] = []
        hold_seconds: list[float] = []
        for n in range(rounds):
            if n % 2 == 0:
                without.append(passthrough("without holds"))
            rss_idle.append(undo.rss_mb())
            held = HeldRequests(undo, upstream)
            hold_seconds.append(held.seconds)
            rss_held.append(undo.rss_mb())
            with_holds.append(passthrough(f"with {HELD} holds"))
            held.deny_all()
            if n % 2 == 1:
                without.append(passthrough("without holds"))
    share = median(with_holds) / median(without)
    case = f"https c={CONCURRENCY} req/s"
    return [
        Row(NAME, f"{case}, none held", undoproxy=rps(median(without))),
        Row(
            NAME,
            f"{case}, {HELD} held",
            undoproxy=rps(median(with_holds)),
            ratio=ratio(share),
            goal=f">= {GOAL:.2f}x",
            met=verdict(share >= GOAL),
        ),
        Row(
            NAME,
            f"RSS with {HELD} held",
            undoproxy=f"{median(rss_held):.0f} MiB",
            ratio=f"{median(rss_held) - median(rss_idle):+.0f} MiB",
            goal="printed",
        ),
        Row(NAME, f"time until {HELD} are pending", undoproxy=f"{median(hold_seconds):.1f} s"),
    ]
