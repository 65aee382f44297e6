"""Side-by-side runs: the same load straight at the upstream, through mitmdump, through undoproxy.

The machine is small and shared, so bare mitmproxy and undoproxy are measured in alternating
short rounds (bare first in even rounds, undoproxy first in odd ones) and each side is
summarised by its best round: a neighbour's burst of work only ever slows a round down.
`direct` is a reference and runs once.

Besides the client's view (requests/s, latency), each proxied round records the proxy
process's CPU time (user + system, all threads) per request it handled. That figure hardly
moves with the neighbours' load, so it is the steady form of the throughput ratio: a proxy
that pins a core serves 1 / (CPU per request) requests per second.

A round during which other processes (another engineer's tests, other VMs) took more than
`noise.FOREIGN_LIMIT` of a core is measured again, up to ATTEMPTS times; `RERUNS` lists them.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from harness import BrokenRun, Mitmdump, Undoproxy, Upstream
from load import LoadResult, LoadSpec, drive
from noise import FOREIGN_LIMIT, Meter, tree_cpu_seconds
from report import NA, Row, ms, ratio, rps, verdict

ATTEMPTS = 3  # per round, while other processes take more than noise.FOREIGN_LIMIT
MAX_RERUNS = 30  # per `make bench`: on a machine that stays busy, accept what it gives
RERUNS: list[str] = []  # what was measured again, for the summary under the table


@dataclass(frozen=True)
class Target:
    """Where a load goes: straight to the upstream, or through one of the proxies."""

    name: str  # direct | bare | undoproxy
    proxy: str | None
    cafile: str  # what an HTTPS client must trust on this path
    session: str | None = None
    pid: int | None = None  # the proxy's process, for its CPU time


def targets(
    upstream: Upstream, bare: Mitmdump, undo: Undoproxy, session: str | None
) -> tuple[Target, Target, Target]:
    """The three paths of one benchmark; `session` names undoproxy's session (credentials)."""
    return (
        Target("direct", None, str(upstream.cert)),
        Target("bare", bare.proxy_url, bare.cafile, pid=bare.proc.pid),
        Target("undoproxy", undo.proxy_url, undo.cafile, session, undo.proc.pid),
    )


def spec_for(target: Target, url: str, **options: Any) -> LoadSpec:
    """The LoadSpec that sends `url`'s load along `target` (options: other LoadSpec fields)."""
    cafile = target.cafile if url.startswith("https:") else None
    return LoadSpec(url=url, proxy=target.proxy, session=target.session, cafile=cafile, **options)


@dataclass
class Round:
    """One measurement: what the client saw, the proxy's CPU per request (ms), foreign load."""

    load: LoadResult
    cpu_ms: float | None = None
    foreign_cores: float = 0.0
    # Attempts measured again because of foreign load: their requests still happened (a
    # journal check must count them), only their timings are discarded.
    discarded: list[LoadResult] = field(default_factory=list)

    def total(self, status: int) -> int:
        """Responses with `status` over every attempt of this round."""
        return sum(r.total(status) for r in (*self.discarded, self.load))


def wait_idle(pid: int, timeout: float = 10.0) -> None:
    """Return once the process has finished what earlier rounds left it (< 5 % of a core)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        before = tree_cpu_seconds(pid)
        time.sleep(0.2)
        if tree_cpu_seconds(pid) - before <= 0.01:  # one clock tick in 0.2 s
            return


def measure_once(target: Target, spec: LoadSpec) -> Round:
    """Drive `spec` along `target` once the proxy is idle, with its CPU time around it."""
    if target.pid is not None:
        wait_idle(target.pid)
    meter = Meter()
    if target.pid is None:
        return Round(drive(spec), None, meter.foreign_cores())
    before = tree_cpu_seconds(target.pid)
    result = drive(spec)
    used = tree_cpu_seconds(target.pid) - before
    return Round(result, used * 1000 / max(1, result.sent), meter.foreign_cores())


def measure(target: Target, spec: LoadSpec) -> Round:
    """`measure_once`, again (up to ATTEMPTS) while other processes took a share of the CPU."""
    discarded: list[LoadResult] = []
    for attempt in range(1, ATTEMPTS + 1):
        done = measure_once(target, spec)
        done.discarded = list(discarded)
        if done.foreign_cores <= FOREIGN_LIMIT or len(RERUNS) >= MAX_RERUNS:
            return done
        discarded.append(done.load)
        scheme, _, rest = spec.url.partition("://")
        what = f"{spec.method} {scheme} /{rest.partition('/')[2]} c={spec.concurrency}"
        RERUNS.append(
            f"{what} {target.name}: {done.foreign_cores:.2f} cores foreign (attempt {attempt})"
        )
        time.sleep(attempt)  # let a neighbour's burst pass
    return done


@dataclass
class Comparison:
    """The runs of one case: direct once, bare and undoproxy once per round."""

    direct: LoadResult
    bare: list[Round] = field(default_factory=list)
    undo: list[Round] = field(default_factory=list)

    def best(self, side: str, metric: str) -> float:
        """A side's best round for `metric`: highest rps; lowest p50_ms, p99_ms, cpu_ms."""
        rounds = self.bare if side == "bare" else self.undo
        if metric == "cpu_ms":
            return min(r.cpu_ms for r in rounds if r.cpu_ms is not None)
        values = [float(getattr(r.load, metric)) for r in rounds]
        return max(values) if metric == "rps" else min(values)


def checked(result: LoadResult, expect: int, what: str) -> LoadResult:
    """The result, if every request (warm-up included) got `expect`; BrokenRun otherwise."""
    seen = {**result.warmup_statuses}
    for code, n in result.statuses.items():
        seen[code] = seen.get(code, 0) + n
    wrong = {k: v for k, v in seen.items() if k != str(expect)}
    if result.errors or wrong or result.requests == 0:
        raise BrokenRun(
            f"{what}: {result.requests} answered, statuses {seen} (warm-up included), "
            f"{result.errors} errors (first: {result.first_error})"
        )
    return result


def compare(
    spec: Callable[[Target, int], LoadSpec],
    paths: tuple[Target, Target, Target],
    rounds: int,
    expect: int,
    what: str,
    after_undo: Callable[[Round, int], None] | None = None,
) -> Comparison:
    """Run `spec(target, round)` direct once, then bare/undoproxy alternating for `rounds`."""
    direct, bare, undo = paths
    out = Comparison(checked(measure(direct, spec(direct, 0)).load, expect, f"{what} direct"))
    for n in range(rounds):
        order = (bare, undo) if n % 2 == 0 else (undo, bare)
        for target in order:
            done = measure(target, spec(target, n))
            checked(done.load, expect, f"{what} {target.name}")
            if target is undo:
                out.undo.append(done)
                if after_undo is not None:
                    after_undo(done, n)
            else:
                out.bare.append(done)
    return out


def case_rows(
    benchmark: str,
    case: str,
    result: Comparison,
    rps_goal: float,
    p50_goal_ms: float | None = None,
    p99: bool = True,
) -> list[Row]:
    """req/s, CPU per request, p50 (and p99) rows of one case: undoproxy against bare."""
    bare_rps, undo_rps = result.best("bare", "rps"), result.best("undoproxy", "rps")
    share = undo_rps / bare_rps
    bare_cpu, undo_cpu = result.best("bare", "cpu_ms"), result.best("undoproxy", "cpu_ms")
    cpu_share = undo_cpu / bare_cpu
    rows = [
        Row(
            benchmark,
            f"{case} req/s",
            rps(result.direct.rps),
            rps(bare_rps),
            rps(undo_rps),
            ratio(share),
            f">= {rps_goal:.2f}x",
            verdict(share >= rps_goal),
        ),
        Row(
            benchmark,
            f"{case} proxy CPU/req",
            NA,
            ms(bare_cpu),
            ms(undo_cpu),
            ratio(cpu_share),
            f"<= {1 / rps_goal:.2f}x",
            verdict(cpu_share <= 1 / rps_goal),
        ),
    ]
    latencies = [("p50", "p50_ms", p50_goal_ms)] + ([("p99", "p99_ms", None)] if p99 else [])
    for label, metric, goal in latencies:
        bare_ms, undo_ms = result.best("bare", metric), result.best("undoproxy", metric)
        added = undo_ms - bare_ms
        rows.append(
            Row(
                benchmark,
                f"{case} {label}",
                ms(getattr(result.direct, metric)),
                ms(bare_ms),
                ms(undo_ms),
                f"{added:+.2f} ms",
                NA if goal is None else f"<= +{goal:.2f} ms",
                NA if goal is None else verdict(added <= goal),
            )
        )
    return rows
