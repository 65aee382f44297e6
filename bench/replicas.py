"""`replicas`: GET req/s through 2 undoproxy replicas vs 1, both on one PostgreSQL journal.

Two `undoproxy run` replicas share a PostgreSQL cluster the benchmark starts (as in `pg`).
Each round sends `GET /small` over plain HTTP at 32 keep-alive connections: to replica A
alone ("1 replica"), or 16 to A and 16 to B at once ("2 replicas"); the two cases alternate.
Every GET is journaled (a read, batched) by the replica it went through.

The load has to leave the proxies the CPU: a Python load generator and a Python upstream
would take most of the second core the second replica needs. So the load is `wrk` (C, one
thread per replica; a Lua script sends the absolute-form request target a proxy expects,
`GET http://127.0.0.1:PORT/small`, with the session's Proxy-Authorization) and the upstream
is nginx (one worker, `return 200` of a ~100-byte JSON document). Both are Debian packages;
without them the benchmark says what to install.

Rows: req/s 2 replicas / 1 (goal >= 1.6x on a 2-core machine), and where the CPU went per
request in each case (the replicas, PostgreSQL, nginx, wrk, from /proc). Broken if wrk saw
errors or non-2xx answers, or if a round's journaled reads do not match what wrk counted
(wrk's count <= journaled <= wrk's count + the requests in flight when it stopped).
"""

from __future__ import annotations

import base64
import contextlib
import re
import resource
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import noise
import paired
from harness import BrokenRun, Child, NotAvailable, Undoproxy, free_port, wait_listening
from paired import wait_idle
from pg import cluster, cpu_of, track
from report import NA, Row, ms, ratio, rps, verdict

NAME = "replicas"
CONNECTIONS = 32
GOAL = 1.6
BODY = '{"ok": true, "service": "bench-nginx", "items": [1, 2, 3], "pad": "xxxxxxxxxxxxxxxxxxxx"}'
INSTALL = "apt-get install wrk nginx-light"
PARTS = ("replicas", "postgres", "nginx", "wrk")


def _tools() -> tuple[str, str]:
    wrk, nginx = shutil.which("wrk"), shutil.which("nginx") or "/usr/sbin/nginx"
    if wrk is None or not Path(nginx).is_file():
        missing = [n for n, p in (("wrk", wrk), ("nginx", shutil.which("nginx"))) if p is None]
        raise NotAvailable(f"{' and '.join(missing)} not installed ({INSTALL})")
    return wrk, nginx


class Nginx(Child):
    """nginx in the foreground, one worker, on a free port: `GET /small` answers BODY."""

    name = "nginx"

    def __init__(self, directory: Path, binary: str) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        conf = directory / "nginx.conf"
        temp = "".join(
            f"    {kind}_temp_path {directory / kind};\n"
            for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
        )
        conf.write_text(
            "daemon off;\nworker_processes 1;\n"
            f"pid {directory / 'nginx.pid'};\nerror_log {directory / 'error.log'} warn;\n"
            "events { worker_connections 1024; }\n"
            "http {\n    access_log off;\n" + temp + "    keepalive_requests 1000000;\n"
            f"    server {{\n        listen 127.0.0.1:{self.port};\n"
            "        location = /small {\n            default_type application/json;\n"
            f"            return 200 '{BODY}';\n        }}\n    }}\n}}\n"
        )
        super().__init__([binary, "-e", str(directory / "error.log"), "-c", str(conf)])
        wait_listening(self.port, self)
        self.url = f"http://127.0.0.1:{self.port}/small"

    def pids(self) -> list[int]:
        """The master and its worker."""
        return [self.proc.pid, *_children(self.proc.pid)]


def _children(parent: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                stat = (entry / "stat").read_text()
                if int(stat.rpartition(")")[2].split()[1]) == parent:
                    found.append(int(entry.name))
    return found


def _script(directory: Path, target: str, session: str) -> Path:
    """wrk's Lua script: absolute-form requests for `target`, with proxy credentials."""
    creds = base64.b64encode(f"{session}:x".encode()).decode()
    host = target.split("/")[2]
    path = directory / f"{session}.lua"
    path.write_text(
        f'wrk.method = "GET"\nwrk.path = "{target}"\n'
        f'wrk.headers["Host"] = "{host}"\n'
        f'wrk.headers["Proxy-Authorization"] = "Basic {creds}"\n'
    )
    return path


@dataclass
class WrkResult:
    """What one wrk run counted."""

    requests: int
    seconds: float
    errors: str | None  # wrk's "Socket errors" / "Non-2xx" lines, if any

    @property
    def rps(self) -> float:
        return self.requests / self.seconds if self.seconds else 0.0


_DONE = re.compile(r"(\d+) requests in ([\d.]+)(us|ms|s|m),")


def _parse(output: str) -> WrkResult:
    found = _DONE.search(output)
    if found is None:
        raise BrokenRun(f"wrk printed no count:\n{output}")
    scale = {"us": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0}[found.group(3)]
    problems = [
        line.strip() for line in output.splitlines() if "Socket errors" in line or "Non-2xx" in line
    ]
    return WrkResult(
        int(found.group(1)), float(found.group(2)) * scale, "; ".join(problems) or None
    )


def wrk(binary: str, proxy_port: int, script: Path, connections: int, seconds: float) -> Any:
    """Start one wrk (one thread) at a replica's proxy port; `.communicate()` ends it."""
    proc = subprocess.Popen(
        [
            binary,
            "-t1",
            f"-c{connections}",
            f"-d{seconds:g}s",
            "--timeout",
            "10s",
            "-s",
            str(script),
            f"http://127.0.0.1:{proxy_port}",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    noise.track(proc.pid)
    return proc


@dataclass
class Case:
    """The rounds of one case: req/s, and CPU ms per request by process group."""

    rps: list[float] = field(default_factory=list)
    cpu: list[dict[str, float]] = field(default_factory=list)
    foreign: list[float] = field(default_factory=list)


def run(workdir: Path, rounds: int, seconds: float) -> list[Row]:
    """Alternate 1-replica and 2-replica rounds; check every round against the journal."""
    wrk_bin, nginx_bin = _tools()
    seconds = max(seconds, 2.0)  # wrk's resolution is a second
    with cluster() as pg, Nginx(workdir / "nginx", nginx_bin) as nginx:
        url = pg.database()
        database = url.rsplit("/", 1)[1]
        config = {"store": {"url": url, "heartbeat": "10s"}}
        # One installation: B's state dir is A's (its CA, credentials key, admin token).
        (workdir / "b").mkdir(parents=True)
        (workdir / "b" / "state").symlink_to(workdir / "a" / "state", target_is_directory=True)
        with (
            Undoproxy(workdir / "a", extra=config) as a,
            Undoproxy(workdir / "b", extra=config) as b,
        ):
            cases = {1: Case(), 2: Case()}
            for n in range(rounds):
                for count in (1, 2) if n % 2 == 0 else (2, 1):
                    for attempt in range(1, paired.ATTEMPTS + 1):
                        done = _round(
                            wrk_bin,
                            workdir,
                            (pg, database),
                            nginx,
                            [a, b][:count],
                            (a, b),
                            f"{n}.{attempt}",
                            seconds,
                        )
                        noisy = done[2] > noise.FOREIGN_LIMIT
                        if not noisy or len(paired.RERUNS) >= paired.MAX_RERUNS:
                            break
                        paired.RERUNS.append(
                            f"{NAME} {count} replica(s): {done[2]:.2f} cores foreign "
                            f"(attempt {attempt})"
                        )
                        time.sleep(attempt)
                    cases[count].rps.append(done[0])
                    cases[count].cpu.append(done[1])
                    cases[count].foreign.append(done[2])
    return _rows(cases)


def _round(
    wrk_bin: str,
    workdir: Path,
    journal: tuple[Any, str],
    nginx: Nginx,
    replicas: list[Undoproxy],
    both: tuple[Undoproxy, Undoproxy],
    n: str,
    seconds: float,
) -> tuple[float, dict[str, float], float]:
    """One measurement: (req/s, CPU ms per request by process group, foreign cores)."""
    pg, database = journal
    count = len(replicas)
    for proxy in both:
        wait_idle(proxy.proc.pid)
    sessions = [f"bench-rep-{count}r-r{n}-{i}".replace(".", "-") for i in range(count)]
    scripts = [_script(workdir, nginx.url, s) for s in sessions]
    per = CONNECTIONS // count
    pairs = list(zip(replicas, scripts, strict=True))
    # Warm-up: connections, the session's first use, each replica's caches.
    warming = [wrk(wrk_bin, p.port, s, per, 1) for p, s in pairs]
    warm_outputs = [w.communicate(timeout=60)[0] for w in warming]
    for proc in warming:
        noise.untrack(proc.pid)
    groups = {"replicas": [p.proc.pid for p in both], "postgres": track(pg), "nginx": nginx.pids()}
    for pid in groups["nginx"]:
        noise.track(pid)
    meter = noise.Meter()
    before = {name: cpu_of(pids) for name, pids in groups.items()}
    children = _reaped_cpu()
    procs = [wrk(wrk_bin, p.port, s, per, seconds) for p, s in pairs]
    outputs = [p.communicate(timeout=seconds + 60)[0] for p in procs]
    for proc in procs:  # reaped: their CPU is now in RUSAGE_CHILDREN
        noise.untrack(proc.pid)
    used = {name: cpu_of(pids) - before[name] for name, pids in groups.items()}
    used["wrk"] = _reaped_cpu() - children
    foreign = meter.foreign_cores()
    for output in [*warm_outputs, *outputs]:
        if _parse(output).errors:
            raise BrokenRun(f"{NAME} {count} replica(s) round {n}: wrk: {_parse(output).errors}")
    results = [_parse(o) for o in outputs]
    for session, warm, result in zip(sessions, warm_outputs, results, strict=True):
        _check_journal(pg, database, session, _parse(warm).requests + result.requests, per)
    total = sum(r.requests for r in results)
    cpu_ms = {name: secs * 1000 / max(1, total) for name, secs in used.items()}
    return sum(r.rps for r in results), cpu_ms, foreign


def _reaped_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _check_journal(pg: Any, database: str, session: str, counted: int, in_flight: int) -> None:
    """The session's journaled reads (in the database) against what wrk counted for it."""
    deadline = time.monotonic() + 30
    journaled = -1
    while time.monotonic() < deadline:
        journaled = int(
            pg.psql(f"SELECT count(*) FROM steps WHERE session_id='{session}'", database)
        )
        if counted <= journaled <= counted + 2 * in_flight:
            return
        time.sleep(0.2)
    raise BrokenRun(
        f"session {session}: wrk counted {counted} answers but the journal holds {journaled} steps"
    )


def _rows(cases: dict[int, Case]) -> list[Row]:
    one, two = cases[1], cases[2]
    best1, best2 = max(one.rps), max(two.rps)
    share = best2 / best1
    rows = [
        Row(
            NAME,
            f"GET http c={CONNECTIONS} req/s, 2 replicas vs 1",
            undoproxy=f"{rps(best2)} vs {rps(best1)}",
            ratio=ratio(share),
            goal=f">= {GOAL:.2f}x",
            met=verdict(share >= GOAL),
        )
    ]
    for count, case in ((1, one), (2, two)):
        best = case.rps.index(max(case.rps))
        cpu = case.cpu[best]
        cores = {k: v * case.rps[best] / 1000 for k, v in cpu.items()}
        rows.append(
            Row(
                NAME,
                f"CPU/req, {count} replica(s): undoproxy | postgres | nginx | wrk",
                undoproxy=" | ".join(ms(cpu[k]) for k in PARTS),
                ratio=NA,
                goal="printed",
            )
        )
        rows.append(
            Row(
                NAME,
                f"cores used, {count} replica(s): undoproxy | postgres | nginx | wrk | others",
                undoproxy=" | ".join(f"{cores[k]:.2f}" for k in PARTS)
                + f" | {case.foreign[best]:.2f}",
                ratio=NA,
                goal="printed",
            )
        )
    return rows
