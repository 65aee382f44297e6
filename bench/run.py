"""`make bench`: run every benchmark and print one table of ratios measured in the same run.

    .venv/bin/python bench/run.py                      # everything (about 9 minutes)
    .venv/bin/python bench/run.py passthrough holds    # some of them
    .venv/bin/python bench/run.py --rounds 10 --seconds 3

Exit status: 0 when every benchmark ran (whether or not it met its goal: goals are for people
to read, and CI must not flake on a noisy machine), 1 when a run was broken (a process failed
to start or crashed, requests failed, or the journal's counts do not add up).
"""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path

import chain
import holds
import journalsize
import llm
import mutations
import paired
import passthrough
import pg
import replicas
import rollback
import rules
import transfers
from harness import BrokenRun, NotAvailable
from report import Row, render, unavailable

Benchmark = Callable[[Path, argparse.Namespace], list[Row]]
BENCHMARKS: dict[str, Benchmark] = {
    "passthrough": lambda d, a: passthrough.run(d, a.rounds, a.seconds),
    "mutations": lambda d, a: mutations.run(d, a.rounds, a.seconds),
    "chain": lambda d, a: chain.run(d, a.rounds, a.seconds),
    "holds": lambda d, a: holds.run(d, a.rounds, a.seconds),
    "rollback": lambda d, a: rollback.run(d, max(2, a.rounds // 2)),
    "rules": lambda d, a: rules.run(),
    "llm": lambda d, a: llm.run(d, max(2, a.rounds // 2)),
    "pg": lambda d, a: pg.run(d, a.rounds, a.seconds),
    "replicas": lambda d, a: replicas.run(d, a.rounds, a.seconds),
    "journal": lambda d, a: journalsize.run(d, max(2, a.rounds // 2)),
    "transfers": lambda d, a: transfers.run(d, max(4, a.rounds // 2)),
}


def parse_args(argv: list[str]) -> argparse.Namespace:
    """The command line."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("names", nargs="*", metavar="BENCHMARK", help=", ".join(BENCHMARKS))
    parser.add_argument("--rounds", type=int, default=6, help="alternating rounds per case")
    parser.add_argument("--seconds", type=float, default=1.5, help="measured seconds per round")
    args = parser.parse_args(argv)
    unknown = [n for n in args.names if n not in BENCHMARKS]
    if unknown:
        parser.error(f"unknown benchmark(s): {', '.join(unknown)}; known: {', '.join(BENCHMARKS)}")
    return args


def main(argv: list[str] | None = None) -> int:
    """Run the chosen benchmarks (all by default), print the table; 1 on a broken run."""
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    args = parse_args(sys.argv[1:] if argv is None else argv)
    names = args.names or list(BENCHMARKS)
    rows: list[Row] = []
    broken: list[str] = []
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="undoproxy-bench-") as tmp:
        for name in names:
            print(f"[bench] {name} ...", file=sys.stderr, flush=True)
            t0 = time.monotonic()
            try:
                rows += BENCHMARKS[name](Path(tmp) / name, args)
            except NotAvailable as exc:
                rows.append(unavailable(name, str(exc)))
            except BrokenRun as exc:
                broken.append(f"{name}: {exc}")
                rows.append(Row(name, "BROKEN RUN (see below)"))
            except Exception:
                broken.append(f"{name}: crashed\n{traceback.format_exc()}")
                rows.append(Row(name, "CRASHED (see below)"))
            print(f"[bench] {name} took {time.monotonic() - t0:.0f}s", file=sys.stderr, flush=True)
    print(render(rows))
    print(f"\n{len(names)} benchmark(s) in {time.monotonic() - started:.0f}s")
    if paired.RERUNS:
        print(f"{len(paired.RERUNS)} round(s) measured again: other processes were busy")
        for rerun in paired.RERUNS:
            print(f"  {rerun}")
    for problem in broken:
        print(f"\nBROKEN {problem}", file=sys.stderr)
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
