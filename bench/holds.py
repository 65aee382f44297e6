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
import noise
from harness import BrokenRun, NotAvailable, Undoproxy, Upstream
from load import LoadResult, LoadSpec
from paired import Round, Target, checked, measure, spec_for
from report import Row, median, ms, ratio, rps, verdict

NAME = "holds"
SESSION = "bench-holds"
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
    """The held session's pending approvals (NotAvailable when there is no approvals API)."""
    found = undo.api("GET", f"/api/approvals?state=pending&session={SESSION}&limit=1000")
    items = found if isinstance(found, list) else found.get("approvals", [])
    return [a for a in items if a.get("state", "pending") == "pending"]


class HeldRequests:
    """500 agents' requests waiting for a decision, sent by one background load process."""

    def __init__(self, undo: Undoproxy, upstream: Upstream) -> None:
        self.undo = undo
        spec = LoadSpec(
            url=upstream.https_url + "/held",
            method="POST",
            json_body=True,
            proxy=undo.proxy_url,
            session=SESSION,
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
            except NotAvailable as exc:
                self.abandon()
                raise NotAvailable(f"holds not implemented ({exc})") from None
            if len(found) >= HELD:
                return [str(a["id"]) for a in found]
            time.sleep(0.25)
        self.abandon()
        raise BrokenRun(f"only {len(found)} of {HELD} requests were pending after 120s")

    def abandon(self) -> None:
        """Stop the waiting agents' process (their requests fail; undoproxy expires them)."""
        if self.child.poll() is None:
            self.child.kill()
        self.child.wait(10)
        noise.untrack(self.child.pid)

    def deny_all(self) -> LoadResult:
        """Deny every held request; each agent must get its 403."""
        for approval in self.ids:
            self.undo.api("POST", f"/api/approvals/{approval}/deny", {"reason": "bench cleanup"})
        try:
            result = load.finish(self.child, timeout=60)
        except subprocess.TimeoutExpired:
            self.abandon()
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
        target = Target("undoproxy", undo.proxy_url, undo.cafile, "bench-holds-load", undo.proc.pid)
        spec = spec_for(
            target, upstream.https_url + "/small", concurrency=CONCURRENCY, duration=seconds
        )

        def passthrough(what: str) -> Round:
            done = measure(target, spec)
            checked(done.load, 200, f"{NAME} {what}")
            return done

        with_holds: list[Round] = []
        without: list[Round] = []
        rss_idle = 0.0  # before the first holds: memory once freed may stay with the process
        rss_held: list[float] = []
        hold_seconds: list[float] = []
        for n in range(rounds):
            if n % 2 == 0:
                without.append(passthrough("without holds"))
            rss_idle = rss_idle or undo.rss_mb()
            held = HeldRequests(undo, upstream)
            try:
                hold_seconds.append(held.seconds)
                rss_held.append(undo.rss_mb())
                with_holds.append(passthrough(f"with {HELD} holds"))
                held.deny_all()
            except BaseException:
                held.abandon()
                raise
            if n % 2 == 1:
                without.append(passthrough("without holds"))
    return rows(with_holds, without, rss_idle, max(rss_held), median(hold_seconds))


def rows(
    with_holds: list[Round], without: list[Round], rss_idle: float, rss: float, seconds: float
) -> list[Row]:
    """The table rows: best rounds with and without holds, memory, time to hold them all."""
    best_with = max(r.load.rps for r in with_holds)
    best_without = max(r.load.rps for r in without)
    cpu_with = min(r.cpu_ms or 0.0 for r in with_holds)
    cpu_without = min(r.cpu_ms or 0.0 for r in without)
    share = best_with / best_without
    case = f"https c={CONCURRENCY}"
    return [
        Row(NAME, f"{case} req/s, none held", undoproxy=rps(best_without)),
        Row(
            NAME,
            f"{case} req/s, {HELD} held",
            undoproxy=rps(best_with),
            ratio=ratio(share),
            goal=f">= {GOAL:.2f}x",
            met=verdict(share >= GOAL),
        ),
        Row(
            NAME,
            f"{case} CPU/req, {HELD} held vs none",
            undoproxy=f"{ms(cpu_with)} vs {ms(cpu_without)}",
            ratio=ratio(cpu_with / cpu_without),
            goal=f"<= {1 / GOAL:.2f}x",
            met=verdict(cpu_with / cpu_without <= 1 / GOAL),
        ),
        Row(
            NAME,
            f"RSS with {HELD} held",
            undoproxy=f"{rss:.0f} MiB",
            ratio=f"{rss - rss_idle:+.0f} MiB",
            goal="printed",
        ),
        Row(NAME, f"time until {HELD} are pending", undoproxy=f"{seconds:.1f} s"),
    ]
