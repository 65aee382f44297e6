"""`rollback`: sessions of 1,000 creates against a REST upstream with state, rolled back.

Prints how long `POST /api/sessions/{id}/rollback` took and its compensations per second,
next to the upstream's own write rate: 1,000 DELETEs sent straight at it, one at a time over
one keep-alive connection (rollback is LIFO, so it cannot go wider than that either). Both
are measured in `rounds` alternating rounds (a new session of 1,000 creates each time) and
each side is its best round, as in the other benchmarks: noise only ever slows a round
down. The run is broken unless the journal held each session's 1,000 mutations, each
rollback reports 1,000 compensated steps, and the upstream is empty afterwards.

Until rollback exists (the endpoint answers 404/405) the benchmark reports "not available".
"""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path
from typing import Any

from harness import BrokenRun, Undoproxy, Upstream
from load import LoadSpec, drive
from paired import checked
from report import Row, ratio, rps, verdict

NAME = "rollback"
MUTATIONS = 1000
SESSION = "bench-rollback"
RULES: list[dict[str, Any]] = [
    {
        "name": "create-item",
        "match": {"host": "127.0.0.1", "method": "POST", "path": "/items"},
        "compensate": "delete-created",
    }
]
FINAL = ("rolled_back", "rollback_incomplete")


def create(undo: Undoproxy, upstream: Upstream, session: str = SESSION) -> None:
    """MUTATIONS creates through undoproxy in `session`, all journaled (else BrokenRun)."""
    spec = LoadSpec(
        url=upstream.https_url + "/items",
        method="POST",
        json_body=True,
        proxy=undo.proxy_url,
        session=session,
        cafile=undo.cafile,
        concurrency=8,
        count=MUTATIONS,
    )
    checked(drive(spec), 201, f"{NAME} creates")
    status, found = undo.api_status("GET", f"/api/sessions/{session}")
    journaled = found.get("mutations") if status == 200 else f"none (admin API: {status})"
    items = upstream.call("GET", "/stats")["items"]
    if journaled != MUTATIONS or items != MUTATIONS:
        raise BrokenRun(f"{MUTATIONS} creates: {journaled} journaled, {items} on the upstream")


def roll_back(undo: Undoproxy, session: str = SESSION) -> tuple[float, dict[str, Any]]:
    """Seconds the rollback took, and its answer (waiting for a final state if it is async)."""
    started = time.monotonic()
    answer = undo.api("POST", f"/api/sessions/{session}/rollback", timeout=600)
    while answer.get("state") not in FINAL:
        if time.monotonic() - started > 600:
            raise BrokenRun(f"rollback still {answer.get('state')} after 600s")
        time.sleep(0.1)
        answer = undo.api("GET", f"/api/sessions/{session}")
    return time.monotonic() - started, answer


def direct_deletes(upstream: Upstream) -> float:
    """The upstream's own rate for MUTATIONS sequential DELETEs over one connection."""
    ids = upstream.call("POST", f"/seed?n={MUTATIONS}")["ids"]
    urls = [f"{upstream.https_url}/items/{i}" for i in ids]
    spec = LoadSpec(url=urls[0], urls=urls, method="DELETE", cafile=str(upstream.cert))
    return checked(drive(spec), 204, f"{NAME} direct DELETEs").rps


def one_rollback(undo: Undoproxy, upstream: Upstream, session: str) -> float:
    """Create MUTATIONS in `session`, roll them back; the seconds the rollback took."""
    create(undo, upstream, session)
    seconds, answer = roll_back(undo, session)
    statuses = Counter(s.get("status") for s in answer.get("steps", []))
    left = upstream.call("GET", "/stats")["items"]
    if answer["state"] != "rolled_back" or statuses["compensated"] != MUTATIONS or left:
        raise BrokenRun(
            f"rollback of {MUTATIONS} creates: state {answer['state']}, step statuses "
            f"{dict(statuses)}, {left} items left on the upstream"
        )
    return seconds


def run(workdir: Path, rounds: int = 3) -> list[Row]:
    """Alternate a rollback of MUTATIONS creates and the direct DELETEs; best of each."""
    best_seconds, best_direct = float("inf"), 0.0
    with (
        Upstream(workdir / "upstream") as upstream,
        Undoproxy(workdir / "undoproxy", RULES) as undo,
    ):
        for n in range(rounds):
            best_seconds = min(best_seconds, one_rollback(undo, upstream, f"{SESSION}-{n}"))
            best_direct = max(best_direct, direct_deletes(upstream))
    rate = MUTATIONS / best_seconds
    return [
        Row(
            NAME,
            f"{MUTATIONS:,} compensations, LIFO (best of {rounds})",
            direct=rps(best_direct),
            undoproxy=f"{rate:,.0f}/s in {best_seconds:.2f} s",
            ratio=ratio(rate / best_direct),
            goal=">= 0.50x",
            met=verdict(rate / best_direct >= 0.5),
        ),
        Row(
            NAME,
            "compensated, upstream empty after each",
            undoproxy=f"{rounds} x {MUTATIONS:,}",
            goal="all",
            met=verdict(True),
        ),
    ]
