"""`chain`: what the journal's hash chain costs a journaled mutation (issue 14: <= 5 %).

The same JSON `POST /items` load as `mutations` (rule `create-item`, `delete-created`,
write-ahead fsync'd) at 8 clients, through two undoproxy processes measured in alternating
rounds: the one `undoproxy run` starts, and the same code started by `bench/nochain.py`,
which turns the chain's triggers off in that process only (undoproxy has no setting for it).
Rows: req/s and proxy CPU per request, chain / no chain, and p50.

The baseline must really have run without its chain, and the other with it: afterwards
`undoproxy verify` must pass on the chained journal and fail on the baseline's (rows without
chain entries), else the run is broken. Every round's session is counted against the 201s,
as in `mutations`.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from harness import BENCH, ROOT, BrokenRun, Undoproxy, Upstream
from load import LoadSpec
from mutations import RULES, JournalCheck
from paired import Comparison, Round, Target, compare, spec_for
from report import NA, Row, ms, ratio, rps, verdict

NAME = "chain"
CLIENTS = 8
GOAL = 0.95  # req/s with the chain / without it


def _session(target: Target, round_: int) -> str | None:
    return None if target.pid is None else f"bench-chain-{target.name}-r{round_}"


def _verify(undo: Undoproxy) -> tuple[int, str]:
    """`undoproxy verify` on a journal: (exit status, first line)."""
    done = subprocess.run(
        [sys.executable, "-m", "undoproxy", "verify", "-c", str(undo.config_path)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    text = (done.stdout or done.stderr).strip()
    return done.returncode, text.splitlines()[0] if text else ""


def run(workdir: Path, rounds: int, seconds: float) -> list[Row]:
    """Measure chain / no chain at 8 clients; check both journals with `verify`."""
    with (
        Upstream(workdir / "upstream") as upstream,
        Undoproxy(
            workdir / "nochain", RULES, launcher=[sys.executable, str(BENCH / "nochain.py")]
        ) as plain,
        Undoproxy(workdir / "chain", RULES) as chained,
    ):
        url = upstream.base("https") + "/items"
        paths = (
            Target("direct", None, str(upstream.cert)),
            Target("nochain", plain.proxy_url, plain.cafile, pid=plain.proc.pid),
            Target("chain", chained.proxy_url, chained.cafile, pid=chained.proc.pid),
        )

        def spec(target: Target, round_: int) -> LoadSpec:
            target = Target(
                target.name, target.proxy, target.cafile, _session(target, round_), target.pid
            )
            return spec_for(
                target, url, method="POST", json_body=True, concurrency=CLIENTS, duration=seconds
            )

        with_chain = JournalCheck(chained)

        def check(done: Round, round_: int) -> None:
            with_chain.session(f"bench-chain-chain-r{round_}", done.total(201))

        result = compare(spec, paths, rounds, 201, f"{NAME} POST c={CLIENTS}", check)
        without = JournalCheck(plain)
        for n, done in enumerate(result.bare):
            without.session(f"bench-chain-nochain-r{n}", done.total(201))
        ok_code, ok_line = _verify(chained)
        bad_code, bad_line = _verify(plain)
        if ok_code != 0 or bad_code == 0:
            raise BrokenRun(
                "verify must pass on the chained journal and fail on the baseline's: "
                f"chained: {ok_code} {ok_line!r}; baseline: {bad_code} {bad_line!r}"
            )
    return _rows(result, with_chain.journaled)


def _rows(result: Comparison, journaled: int) -> list[Row]:
    case = f"POST https c={CLIENTS}"
    none_rps, chain_rps = result.best("bare", "rps"), result.best("undoproxy", "rps")
    none_cpu, chain_cpu = result.best("bare", "cpu_ms"), result.best("undoproxy", "cpu_ms")
    none_p50, chain_p50 = result.best("bare", "p50_ms"), result.best("undoproxy", "p50_ms")
    share, cpu_share = chain_rps / none_rps, chain_cpu / none_cpu
    return [
        Row(
            NAME,
            f"{case} req/s, chain vs none",
            undoproxy=f"{rps(chain_rps)} vs {rps(none_rps)}",
            ratio=ratio(share),
            goal=f">= {GOAL:.2f}x",
            met=verdict(share >= GOAL),
        ),
        Row(
            NAME,
            f"{case} proxy CPU/req, chain vs none",
            undoproxy=f"{ms(chain_cpu)} vs {ms(none_cpu)}",
            ratio=ratio(cpu_share),
            goal=f"<= {1 / GOAL:.2f}x",
            met=verdict(cpu_share <= 1 / GOAL),
        ),
        Row(
            NAME,
            f"{case} p50, chain vs none",
            undoproxy=f"{ms(chain_p50)} vs {ms(none_p50)}",
            ratio=f"{chain_p50 - none_p50:+.2f} ms",
        ),
        Row(
            NAME,
            "verify: chained journal ok, baseline fails",
            undoproxy=f"{journaled:,} steps chained",
            goal="both",
            met=verdict(True),
            ratio=NA,
        ),
    ]
