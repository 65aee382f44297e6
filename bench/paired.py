"""Side-by-side runs: the same load straight at the upstream, through mitmdump, through undoproxy.

The machine is small and noisy, so bare mitmproxy and undoproxy are measured in alternating
short rounds (bare first in even rounds, undoproxy first in odd ones) and each side is
summarised by the median of its rounds; `direct` is a reference and runs once.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from harness import BrokenRun, Mitmdump, Undoproxy, Upstream
from load import LoadResult, LoadSpec, drive
from report import median


@dataclass(frozen=True)
class Target:
    """Where a load goes: straight to the upstream, or through one of the proxies."""

    name: str  # direct | bare | undoproxy
    proxy: str | None
    cafile: str  # what an HTTPS client must trust on this path
    session: str | None = None


def targets(
    upstream: Upstream, bare: Mitmdump, undo: Undoproxy, session: str | None
) -> tuple[Target, Target, Target]:
    """The three paths of one benchmark; `session` names undoproxy's session (credentials)."""
    return (
        Target("direct", None, str(upstream.cert)),
        Target("bare", bare.proxy_url, bare.cafile),
        Target("undoproxy", undo.proxy_url, undo.cafile, session),
    )


def spec_for(target: Target, url: str, **options: Any) -> LoadSpec:
    """The LoadSpec that sends `url`'s load along `target` (options: other LoadSpec fields)."""
    cafile = target.cafile if url.startswith("https:") else None
    return LoadSpec(url=url, proxy=target.proxy, session=target.session, cafile=cafile, **options)


@dataclass
class Comparison:
    """The runs of one case: direct once, bare and undoproxy once per round."""

    direct: LoadResult | None
    bare: list[LoadResult] = field(default_factory=list)
    undo: list[LoadResult] = field(default_factory=list)

    def med(self, side: str, metric: str) -> float:
        """The median of `metric` (rps, p50_ms, p99_ms) over a side's rounds."""
        runs = self.bare if side == "bare" else self.undo
        return median([getattr(r, metric) for r in runs])


def checked(result: LoadResult, expect: int, what: str) -> LoadResult:
    """The result, if every request got `expect`; BrokenRun otherwise."""
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
    after_undo: Callable[[LoadResult, int], None] | None = None,
) -> Comparison:
    """Run `spec(target, round)` direct once, then bare/undoproxy alternating for `rounds`."""
    direct, bare, undo = paths
    out = Comparison(checked(drive(spec(direct, 0)), expect, f"{what} direct"))
    for n in range(rounds):
        order = (bare, undo) if n % 2 == 0 else (undo, bare)
        for target in order:
            result = checked(drive(spec(target, n)), expect, f"{what} {target.name}")
            if target is undo:
                out.undo.append(result)
                if after_undo is not None:
                    after_undo(result, n)
            else:
                out.bare.append(result)
    return out
