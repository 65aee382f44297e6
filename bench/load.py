"""The load generator: a concurrent keep-alive aiohttp client, run in its own process.

The parent builds a `LoadSpec` and calls `drive(spec)` (or `start(spec)` for a load that must
run in the background); the child (`python bench/load.py SPEC_JSON`) runs it and prints one
JSON `LoadResult`. Keeping the client out of the proxies' and the upstream's processes means
the three share the machine's cores through the OS scheduler instead of one Python loop.

Each of `concurrency` workers sends its requests one after the other over its own pooled
connection (`TCPConnector(limit=concurrency)`), so concurrency is the number of requests in
flight. A timed run first warms up (TLS handshakes, certificate generation, pool filling) and
then measures for `duration` seconds; a counted run sends exactly `count` requests.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import ssl
import subprocess
import sys
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

import aiohttp
import noise

HERE = Path(__file__).resolve().parent


@dataclass
class LoadSpec:
    """What to send, where, through which proxy, and for how long."""

    url: str
    method: str = "GET"
    urls: list[str] = field(default_factory=list)  # when given, one request per URL, in order
    proxy: str | None = None
    session: str | None = None  # sent as proxy credentials SESSION:x
    cafile: str | None = None  # what the client trusts (the proxy's CA, or the upstream's cert)
    concurrency: int = 1
    warmup: float = 0.5
    duration: float = 2.0
    count: int | None = None  # a counted run instead of a timed one
    json_body: bool = False  # a small distinct JSON document per request
    timeout: float = 60.0


@dataclass
class LoadResult:
    """What one run measured (latencies in milliseconds)."""

    requests: int
    seconds: float
    rps: float
    p50_ms: float
    p99_ms: float
    statuses: dict[str, int]  # of the measured requests
    errors: int  # warm-up included
    first_error: str | None = None
    warmup_statuses: dict[str, int] = field(default_factory=dict)

    def count(self, status: int) -> int:
        """How many measured responses had this status."""
        return self.statuses.get(str(status), 0)

    @property
    def sent(self) -> int:
        """Every request sent, warm-up and failures included."""
        return self.requests + sum(self.warmup_statuses.values()) + self.errors

    def total(self, status: int) -> int:
        """How many responses, warm-up included, had this status (what the upstream saw)."""
        return self.count(status) + self.warmup_statuses.get(str(status), 0)


def percentile(values: list[float], fraction: float) -> float:
    """The value at `fraction` (0..1) of the sorted values; 0.0 for none."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


class _Run:
    """The mutable tally of one phase."""

    def __init__(self) -> None:
        self.latencies: list[float] = []
        self.statuses: Counter[str] = Counter()
        self.errors = 0
        self.first_error: str | None = None


async def _one(
    session: aiohttp.ClientSession, spec: LoadSpec, url: str, n: int, tally: _Run
) -> None:
    body = {"name": f"item-{n}", "price": n % 997, "tags": ["bench", "load"]}
    started = time.perf_counter()
    try:
        async with session.request(
            spec.method,
            url,
            json=body if spec.json_body else None,
            proxy=spec.proxy,
            proxy_auth=aiohttp.BasicAuth(spec.session, "x") if spec.session else None,
        ) as response:
            await response.read()
        tally.latencies.append((time.perf_counter() - started) * 1000)
        tally.statuses[str(response.status)] += 1
    except Exception as exc:  # counted and reported: the parent decides if the run is broken
        tally.errors += 1
        tally.first_error = tally.first_error or f"{type(exc).__name__}: {exc}"


async def _timed(session: aiohttp.ClientSession, spec: LoadSpec, seconds: float) -> _Run:
    tally, numbers = _Run(), itertools.count()
    deadline = time.perf_counter() + seconds

    async def worker() -> None:
        while time.perf_counter() < deadline:
            await _one(session, spec, spec.url, next(numbers), tally)

    await asyncio.gather(*(worker() for _ in range(spec.concurrency)))
    return tally


async def _counted(session: aiohttp.ClientSession, spec: LoadSpec) -> _Run:
    tally = _Run()
    urls = spec.urls or [spec.url] * (spec.count or 0)
    jobs = iter(enumerate(urls))

    async def worker() -> None:
        for n, url in jobs:
            await _one(session, spec, url, n, tally)

    await asyncio.gather(*(worker() for _ in range(spec.concurrency)))
    return tally


async def run(spec: LoadSpec) -> LoadResult:
    """Run the load in this process."""
    tls = ssl.create_default_context(cafile=spec.cafile) if spec.cafile else None
    connector = aiohttp.TCPConnector(limit=spec.concurrency, ssl=tls if tls else True)
    timeout = aiohttp.ClientTimeout(total=spec.timeout)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        warm = _Run()
        if spec.count is None and not spec.urls:
            if spec.warmup > 0:
                warm = await _timed(session, spec, spec.warmup)
            started = time.perf_counter()
            tally = await _timed(session, spec, spec.duration)
        else:
            started = time.perf_counter()
            tally = await _counted(session, spec)
        seconds = time.perf_counter() - started
    done = len(tally.latencies)
    return LoadResult(
        requests=done,
        seconds=seconds,
        rps=done / seconds if seconds > 0 else 0.0,
        p50_ms=percentile(tally.latencies, 0.50),
        p99_ms=percentile(tally.latencies, 0.99),
        statuses=dict(tally.statuses),
        errors=warm.errors + tally.errors,
        first_error=warm.first_error or tally.first_error,
        warmup_statuses=dict(warm.statuses),
    )


# --- the parent's side ---------------------------------------------------------------------


def start(spec: LoadSpec) -> subprocess.Popen[str]:
    """Start the load in a child process; `finish()` collects its result."""
    child = subprocess.Popen(
        [sys.executable, str(HERE / "load.py"), json.dumps(asdict(spec))],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    noise.track(child.pid)
    return child


def finish(child: subprocess.Popen[str], timeout: float | None = None) -> LoadResult:
    """Wait for a child started by `start()` and parse its result."""
    try:
        out, err = child.communicate(timeout=timeout)
    finally:
        if child.returncode is not None:
            noise.untrack(child.pid)
    if child.returncode != 0:
        raise RuntimeError(f"load generator failed ({child.returncode}):\n{err.strip()}")
    return LoadResult(**json.loads(out))


def drive(spec: LoadSpec) -> LoadResult:
    """Run the load in a child process and return what it measured."""
    budget = spec.warmup + spec.duration + spec.timeout + 30
    return finish(start(spec), timeout=budget)


if __name__ == "__main__":
    result = asyncio.run(run(LoadSpec(**json.loads(sys.argv[1]))))
    print(json.dumps(asdict(result)))
