"""`pg`: journaled mutations with the journal on PostgreSQL (`store.url`) vs SQLite (`store.path`).

The `mutations` load (JSON `POST /items`, rule `create-item` with `delete-created`, every
write-ahead row committed before its POST is forwarded) at 8 clients over HTTPS, through two
undoproxy processes, one replica each, measured in alternating rounds: one journals to a
SQLite file (`synchronous=FULL`), the other to a PostgreSQL 15 cluster the benchmark starts
(Debian's binaries, `initdb` in a temporary directory, fsync on as in production).

Rows: req/s and undoproxy's CPU per request, PostgreSQL / SQLite, and PostgreSQL's own CPU:
the CPU time of every process of the cluster (postmaster, backends, WAL writer, ...) from
/proc around each PostgreSQL round, per request and as a share of the CPU a request costs
(undoproxy + PostgreSQL). Broken unless every round's session holds exactly one succeeded
POST step per 201 the client got, on both journals.
"""

from __future__ import annotations

import contextlib
import importlib.util
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import ModuleType
from typing import Any

import noise
from harness import ROOT, BrokenRun, NotAvailable, Undoproxy, Upstream
from load import LoadSpec
from mutations import RULES, JournalCheck
from paired import Round, Target, measure, spec_for
from report import NA, Row, ms, ratio, rps

NAME = "pg"
CLIENTS = 8


def _postgres_support() -> ModuleType:
    """tests/support/postgres.py: the same throw-away cluster the tests use."""
    spec = importlib.util.spec_from_file_location(
        "bench_postgres", ROOT / "tests" / "support" / "postgres.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@contextlib.contextmanager
def cluster() -> Iterator[Any]:
    """A durable PostgreSQL cluster on a free port, removed afterwards; NotAvailable
    when PostgreSQL is not installed."""
    support = _postgres_support()
    if support.bin_dir() is None:
        raise NotAvailable("PostgreSQL is not installed (apt-get install postgresql)")
    started = support.Cluster(durable=True).start()
    try:
        yield started
    finally:
        for pid in started.pids():
            noise.untrack(pid)
        started.stop()


def track(pg: Any) -> list[int]:
    """Count the cluster's processes as the benchmark's own (not foreign load); their pids."""
    pids: list[int] = pg.pids()
    for pid in pids:
        noise.track(pid)
    return pids


def cpu_of(pids: list[int]) -> float:
    """CPU seconds these processes have used so far (those that still run)."""
    total = 0.0
    for pid in pids:
        with contextlib.suppress(OSError):
            total += noise.cpu_seconds(pid)
    return total


@dataclass
class PgRounds:
    """PostgreSQL's CPU (ms per request, cores) in each PostgreSQL round."""

    cpu_ms: list[float] = field(default_factory=list)
    cores: list[float] = field(default_factory=list)


def measure_with_pg(target: Target, spec: LoadSpec, pg: Any, into: PgRounds) -> Round:
    """`paired.measure`, with the cluster's CPU time read around it."""
    pids = track(pg)
    before = cpu_of(pids)
    done = measure(target, spec)
    used = cpu_of(pids) - before
    sent = max(1, sum(r.sent for r in (*done.discarded, done.load)))
    seconds = sum(r.seconds for r in (*done.discarded, done.load))
    into.cpu_ms.append(used * 1000 / sent)
    into.cores.append(used / seconds if seconds else 0.0)
    return done


def run(workdir: Path, rounds: int, seconds: float) -> list[Row]:
    """Alternate SQLite and PostgreSQL rounds at 8 clients; check both journals."""
    with cluster() as pg, Upstream(workdir / "upstream") as upstream:
        url = pg.database()
        with (
            Undoproxy(workdir / "sqlite", RULES) as lite,
            Undoproxy(
                workdir / "postgres",
                RULES,
                {"store": {"url": url}},
            ) as shared,
        ):
            paths = (
                Target("sqlite", lite.proxy_url, lite.cafile, pid=lite.proc.pid),
                Target("postgres", shared.proxy_url, shared.cafile, pid=shared.proc.pid),
            )
            checks = {"sqlite": JournalCheck(lite), "postgres": JournalCheck(shared)}
            target_url = upstream.base("https") + "/items"
            measured: dict[str, list[Round]] = {"sqlite": [], "postgres": []}
            pg_rounds = PgRounds()
            for n in range(rounds):
                for target in paths if n % 2 == 0 else reversed(paths):
                    session = f"bench-pg-{target.name}-r{n}"
                    spec = spec_for(
                        replace(target, session=session),
                        target_url,
                        method="POST",
                        json_body=True,
                        concurrency=CLIENTS,
                        duration=seconds,
                    )
                    if target.name == "postgres":
                        done = measure_with_pg(target, spec, pg, pg_rounds)
                    else:
                        done = measure(target, spec)
                    _all_created(done, f"{NAME} {target.name} round {n}")
                    checks[target.name].session(session, done.total(201))
                    measured[target.name].append(done)
    return _rows(measured, pg_rounds, checks)


def _all_created(done: Round, what: str) -> None:
    for result in (*done.discarded, done.load):
        wrong = {k: v for k, v in result.statuses.items() if k != "201"}
        wrong.update({k: v for k, v in result.warmup_statuses.items() if k != "201"})
        if result.errors or wrong or result.requests == 0:
            raise BrokenRun(
                f"{what}: {result.requests} answered, other statuses {wrong}, "
                f"{result.errors} errors (first: {result.first_error})"
            )


def _best(rounds: list[Round], metric: str) -> float:
    if metric == "cpu_ms":
        return min(r.cpu_ms for r in rounds if r.cpu_ms is not None)
    values = [float(getattr(r.load, metric)) for r in rounds]
    return max(values) if metric == "rps" else min(values)


def _rows(
    measured: dict[str, list[Round]], pg: PgRounds, checks: dict[str, JournalCheck]
) -> list[Row]:
    case = f"POST https c={CLIENTS}"
    lite, shared = measured["sqlite"], measured["postgres"]
    lite_rps, pg_rps = _best(lite, "rps"), _best(shared, "rps")
    lite_cpu, pg_proxy_cpu = _best(lite, "cpu_ms"), _best(shared, "cpu_ms")
    lite_p50, pg_p50 = _best(lite, "p50_ms"), _best(shared, "p50_ms")
    # PostgreSQL's CPU in the round where undoproxy's own CPU per request was lowest (the
    # quietest round), so the two figures of the share come from one round.
    quiet = min(range(len(shared)), key=lambda i: shared[i].cpu_ms or float("inf"))
    db_ms, db_cores = pg.cpu_ms[quiet], pg.cores[quiet]
    share = db_ms / (db_ms + (shared[quiet].cpu_ms or 0.0))
    journaled = {name: f"{c.journaled:,}/{c.expected:,}" for name, c in checks.items()}
    return [
        Row(
            NAME,
            f"{case} req/s, postgres vs sqlite",
            undoproxy=f"{rps(pg_rps)} vs {rps(lite_rps)}",
            ratio=ratio(pg_rps / lite_rps),
            goal="printed",
        ),
        Row(
            NAME,
            f"{case} undoproxy CPU/req, postgres vs sqlite",
            undoproxy=f"{ms(pg_proxy_cpu)} vs {ms(lite_cpu)}",
            ratio=ratio(pg_proxy_cpu / lite_cpu),
        ),
        Row(
            NAME,
            f"{case} p50, postgres vs sqlite",
            undoproxy=f"{ms(pg_p50)} vs {ms(lite_p50)}",
            ratio=f"{pg_p50 - lite_p50:+.2f} ms",
        ),
        Row(
            NAME,
            "PostgreSQL's own CPU/req, share of a request's CPU",
            undoproxy=f"{ms(db_ms)} ({db_cores:.2f} cores)",
            ratio=f"{share:.0%}",
            goal="printed",
        ),
        Row(
            NAME,
            "journaled mutation steps, postgres | sqlite",
            undoproxy=f"{journaled['postgres']} | {journaled['sqlite']}",
            goal="all",
            met="yes",
            ratio=NA,
        ),
    ]
