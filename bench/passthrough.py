"""`passthrough`: GETs that match no rule, HTTPS and HTTP, 1 and 32 concurrent clients.

Goal: undoproxy's throughput at least bare mitmdump's (ratio >= 1.0), and at most 0.5 ms
added to the median latency. undoproxy runs with a few rules (none matches these GETs), so
the numbers include what matching costs a request that no rule is about.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness import Mitmdump, Undoproxy, Upstream
from load import LoadSpec
from paired import Comparison, Target, compare, spec_for, targets
from report import Row, ms, ratio, rps, verdict

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


def rows_for(case: str, result: Comparison) -> list[Row]:
    """req/s, p50 and p99 rows of one case."""
    assert result.direct is not None
    bare_rps, undo_rps = result.med("bare", "rps"), result.med("undoproxy", "rps")
    rps_ratio = undo_rps / bare_rps if bare_rps else 0.0
    bare_p50, undo_p50 = result.med("bare", "p50_ms"), result.med("undoproxy", "p50_ms")
    bare_p99, undo_p99 = result.med("bare", "p99_ms"), result.med("undoproxy", "p99_ms")
    added = undo_p50 - bare_p50
    return [
        Row(
            NAME,
            f"{case} req/s",
            rps(result.direct.rps),
            rps(bare_rps),
            rps(undo_rps),
            ratio(rps_ratio),
            f">= {RPS_GOAL:.2f}x",
            verdict(rps_ratio >= RPS_GOAL),
        ),
        Row(
            NAME,
            f"{case} p50",
            ms(result.direct.p50_ms),
            ms(bare_p50),
            ms(undo_p50),
            f"{added:+.2f} ms",
            f"<= +{ADDED_P50_GOAL_MS:.2f} ms",
            verdict(added <= ADDED_P50_GOAL_MS),
        ),
        Row(
            NAME,
            f"{case} p99",
            ms(result.direct.p99_ms),
            ms(bare_p99),
            ms(undo_p99),
            f"{undo_p99 - bare_p99:+.2f} ms",
        ),
    ]


def run(workdir: Path, rounds: int, seconds: float) -> list[Row]:
    """Measure every case; one process each for the upstream, mitmdump and undoproxy."""
    rows: list[Row] = []
    with (
        Upstream(workdir / "upstream") as upstream,
        Mitmdump(workdir / "mitmdump") as bare,
        Undoproxy(workdir / "undoproxy", RULES) as undo,
    ):
        paths = targets(upstream, bare, undo, session="bench-passthrough")
        for scheme, concurrency in CASES:
            url = upstream.base(scheme) + "/small"

            def spec(target: Target, _round: int, url: str = url, c: int = concurrency) -> LoadSpec:
                return spec_for(target, url, concurrency=c, duration=seconds)

            case = f"{scheme} c={concurrency}"
            rows += rows_for(case, compare(spec, paths, rounds, 200, f"{NAME} {case}"))
    return rows
