"""`mutations`: JSON POSTs that undoproxy journals write-ahead with a `delete-created` compensation.

Goal: at 8 clients at least 0.90 of bare mitmdump's POST throughput, although every
write-ahead row is fsync'd before its POST is forwarded (`synchronous=FULL`; concurrent POSTs
share one commit); at 1 client (each POST waits for its own fsync) and 32 at least 0.75.
Afterwards every undoproxy round's session is read back through the admin API: it must hold
exactly one succeeded mutation step per 201 the client got, or the run is broken (a mutation
went through unjournaled).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from harness import BrokenRun, Mitmdump, Undoproxy, Upstream
from load import LoadSpec
from paired import Round, Target, case_rows, compare, spec_for, targets
from report import Row, verdict

NAME = "mutations"
CASES = (("https", 1, 0.75), ("https", 8, 0.90), ("https", 32, 0.75))  # scheme, clients, goal
RULES: list[dict[str, Any]] = [
    {
        "name": "create-item",
        "match": {"host": "127.0.0.1", "method": "POST", "path": "/items"},
        "compensate": "delete-created",
    }
]


def session_name(case: str, round_: int) -> str:
    """undoproxy's session for one round of one case."""
    return f"bench-mut-{case.replace(' ', '').replace('=', '')}-r{round_}"


class JournalCheck:
    """Counts each undoproxy round's journaled mutations against the client's 201s."""

    def __init__(self, undo: Undoproxy) -> None:
        self.undo = undo
        self.expected = 0
        self.journaled = 0
        self.with_compensation = 0

    def session(self, session_id: str, created: int) -> None:
        """Check one session; BrokenRun on any mismatch."""
        steps = [s for s in self.undo.steps(session_id) if s.get("mutation")]
        good = [s for s in steps if s["method"] == "POST" and s["status"] == "succeeded"]
        if len(steps) != created or len(good) != created:
            statuses = sorted({s["status"] for s in steps})
            raise BrokenRun(
                f"session {session_id}: the client got {created} x 201 but the journal holds "
                f"{len(steps)} mutation steps, {len(good)} succeeded POSTs (statuses {statuses})"
            )
        self.expected += created
        self.journaled += len(good)
        self.with_compensation += sum(1 for s in good if _compensation_kind(s) == "delete-created")


def _compensation_kind(step: dict[str, Any]) -> str | None:
    comp = step.get("compensation") or {}
    return comp.get("kind") or (
        "delete-created" if comp.get("method") == "DELETE" and comp.get("url") else None
    )


def run(workdir: Path, rounds: int, seconds: float) -> list[Row]:
    """Measure every case, then report the journal's count of mutation steps."""
    rows: list[Row] = []
    with (
        Upstream(workdir / "upstream") as upstream,
        Mitmdump(workdir / "mitmdump") as bare,
        Undoproxy(workdir / "undoproxy", RULES) as undo,
    ):
        journal = JournalCheck(undo)
        for scheme, concurrency, goal in CASES:
            case = f"{scheme} c={concurrency}"
            url = upstream.base(scheme) + "/items"
            paths = targets(upstream, bare, undo, session=None)

            def spec(
                target: Target, round_: int, url: str = url, c: int = concurrency, case: str = case
            ) -> LoadSpec:
                session = session_name(case, round_) if target.name == "undoproxy" else None
                target = replace(target, session=session)
                return spec_for(
                    target, url, method="POST", json_body=True, concurrency=c, duration=seconds
                )

            def check(done: Round, round_: int, case: str = case) -> None:
                journal.session(session_name(case, round_), done.total(201))

            result = compare(spec, paths, rounds, 201, f"{NAME} {case}", check)
            rows += case_rows(NAME, f"POST {case}", result, goal, p99=False)
        rows.append(
            Row(
                NAME,
                "journaled mutation steps",
                undoproxy=f"{journal.journaled:,}/{journal.expected:,}",
                goal="all",
                met=verdict(journal.journaled == journal.expected),
            )
        )
        rows.append(
            Row(
                NAME,
                "with a delete-created compensation",
                undoproxy=f"{journal.with_compensation:,}/{journal.expected:,}",
                goal="all",
                met=verdict(journal.with_compensation == journal.expected),
            )
        )
    return rows
