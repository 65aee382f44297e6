"""`passthrough`: GETs that match no rule, HTTPS and HTTP, 1 and 32 concurrent clients.

Goal: undoproxy's throughput at least bare mitmdump's (ratio >= 1.0; the proxy's CPU per
request at most bare's), and at most 0.5 ms added to the median latency. undoproxy runs as a
real deployment would: a few rules of its own (none matches these GETs), every built-in API
pack on (the default) and every guardrail configured (budgets, loop detection, hold_at), so
the numbers include what deciding costs a request that nothing is about.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness import Mitmdump, Undoproxy, Upstream
from load import LoadSpec
from paired import Target, case_rows, compare, spec_for, targets
from report import Row

NAME = "passthrough"
CASES = (("https", 1), ("https", 32), ("http", 1), ("http", 32))
RPS_GOAL = 1.0
ADDED_P50_GOAL_MS = 0.5
# Rules a real deployment has; the benchmark's GET /small matches none of them.
RULES: list[dict[str, Any]] = [
    {
        "name": "create-item",
        "match": {"host": "127.0.0.1", "method": "POST", "path": "/items"},
        "compensate": "delete-created",
    },
    {
        "name": "no-admin-deletes",
        "match": {"host": "*.example.test", "method": "DELETE", "path": "/admin/**"},
        "action": "deny",
    },
    {
        "name": "hold-payments",
        "match": {"host": "127.0.0.1", "method": "POST", "path": "/payments/**"},
        "action": "hold",
    },
]


GUARDS: dict[str, Any] = {
    "guard": {
        "max_mutations": 100_000,
        "max_mutations_per_minute": 100_000,
        "repeat": {"count": 1000, "window": "60s"},
    },
    "approvals": {"timeout": "600s", "hold_at": "critical"},
    "defaults": {"mutations": "hold-irreversible"},
}


def run(workdir: Path, rounds: int, seconds: float) -> list[Row]:
    """Measure every case; one process each for the upstream, mitmdump and undoproxy."""
    rows: list[Row] = []
    with (
        Upstream(workdir / "upstream") as upstream,
        Mitmdump(workdir / "mitmdump") as bare,
        Undoproxy(workdir / "undoproxy", RULES, GUARDS) as undo,
    ):
        paths = targets(upstream, bare, undo, session="bench-passthrough")
        for scheme, concurrency in CASES:
            url = upstream.base(scheme) + "/small"

            def spec(target: Target, _round: int, url: str = url, c: int = concurrency) -> LoadSpec:
                return spec_for(target, url, concurrency=c, duration=seconds)

            case = f"{scheme} c={concurrency}"
            result = compare(spec, paths, rounds, 200, f"{NAME} {case}")
            rows += case_rows(NAME, case, result, RPS_GOAL, ADDED_P50_GOAL_MS)
    return rows
