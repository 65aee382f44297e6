"""`journal`: what an operator's views cost as the journal grows (issue 27), at 1e4 and 1e5
journaled steps, as ratios 1e5 / 1e4.

Each journal holds 100 sessions: `big` with 10,000 steps (the session shown) and 99 others
sharing the rest (none at 1e4, ~909 each at 1e5), every step ~1.9 KB as a proxied JSON POST
journals it. It is filled fast by writing rows straight into a migrated journal file with
their keyed hash-chain entries computed as undoproxy's writer computes them (one entry per
row, in order, under the chain key of the credentials key in the state dir the undoproxy
it starts uses), not by proxying 1e5 requests; `undoproxy verify` must pass on it, else the run is
broken. Then `undoproxy run` opens it and, in rounds, the benchmark times:
- `GET /api/sessions` (the first page, with counts): the listing the Sessions page, `undoproxy
  sessions` and the API share (goal: the same at 1e5 as at 1e4, <= 1.2x);
- `show` of `big`: every page of its 10,000 steps (`?limit=1000&cursor=`), and undoproxy's
  RSS after it (memory flat);
- `undoproxy verify`: time, and the verify process's peak RSS (constant memory: flat).
Columns: `bare mitmproxy` is the figure at 1e4 steps, `undoproxy` at 1e5, `ratio` 1e5 / 1e4.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

from harness import ROOT, BrokenRun, Undoproxy
from report import Row, median, ms, ratio, verdict

from undoproxy.credentials import CredentialBox
from undoproxy.store import chain
from undoproxy.store.journal import Journal
from undoproxy.store.records import STEP_COLUMNS, Step

NAME = "journal"
SIZES = (10_000, 100_000)
SESSIONS = 100
BIG = 10_000  # steps of the session shown
GOAL_LIST = 1.2
GOAL_FLAT = 1.2
BODY = json.dumps({"name": "x" * 300, "items": list(range(60))}).encode()


def fill(path: Path, steps: int) -> None:
    """A migrated journal at `path` with `steps` steps in SESSIONS sessions, chained with the
    chain key of the state dir next to it (`Undoproxy(directory)`'s)."""
    box = CredentialBox.from_state_dir(path.parent / "state")
    key = chain.ChainKey.of(box)
    asyncio.run(_create(path, box))
    db = sqlite3.connect(path, isolation_level=None)
    try:
        db.execute("BEGIN")
        prev = chain.GENESIS
        entries: list[tuple[str, str, int, str, str, str, str]] = []

        def entry(table: str, row_id: str, payload: bytes) -> None:
            nonlocal prev
            digest = chain.row_hash(payload)
            keyed = key.entry_hash(prev, table, row_id, digest)
            entries.append((table, row_id, 1, prev, keyed, key.id, digest))
            prev = keyed

        now = time.time() - 3600.0
        session_columns = (
            "id",
            "token",
            "intent",
            "agent",
            "state",
            "created_at",
            "updated_at",
            "frozen",
        )
        names = ["big", *(f"s{n:03d}" for n in range(1, SESSIONS))]
        for n, name in enumerate(names):
            row = (name, f"tok-{name}", "bench", None, "committed", now + n, now + n, 0)
            db.execute(f"INSERT INTO sessions VALUES ({', '.join('?' * len(row))})", row)
            columns = zip(session_columns, row, strict=True)
            entry("sessions", name, chain.canonical("sessions", columns))
        others = steps - BIG
        per = -(-others // (SESSIONS - 1)) if others > 0 else 0
        plan = [("big", BIG)] + [
            (name, min(per, max(0, others - i * per))) for i, name in enumerate(names[1:])
        ]
        insert = (
            f"INSERT INTO steps ({', '.join(STEP_COLUMNS)}) "
            f"VALUES ({', '.join('?' for _ in STEP_COLUMNS)})"
        )
        batch = []
        for session, count in plan:
            for seq in range(1, count + 1):
                row = _step(session, seq, now + seq * 0.001)
                values = tuple(row[c] for c in STEP_COLUMNS)
                batch.append(values)
                payload = chain.canonical("steps", zip(STEP_COLUMNS, values, strict=True))
                entry("steps", str(row["id"]), payload)
                if len(batch) >= 5000:
                    db.executemany(insert, batch)
                    batch.clear()
        db.executemany(insert, batch)
        db.executemany(chain.INSERT_ENTRY, entries)
        db.execute("COMMIT")
        # As a journal that has been running is: its WAL checkpointed (one huge commit left
        # every page in the WAL, and each read would look it up there first).
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        db.close()


async def _create(path: Path, box: CredentialBox) -> None:
    journal = await Journal.open(path, box=box)
    await journal.close()


def _step(session: str, seq: int, at: float) -> dict[str, object]:
    step = Step(
        id=f"st_{hashlib.sha256(f'{session}/{seq}'.encode()).hexdigest()[:16]}",
        session_id=session,
        seq=seq,
        method="POST",
        url=f"https://api.example.test/items?page={seq}",
        is_mutation=True,
        status="succeeded",
        created_at=at,
        updated_at=at + 0.01,
        rule="create-item",
        risk="low",
        action="allow",
        request_headers=[["content-type", "application/json"], ["user-agent", "bench"]],
        request_body=BODY,
        request_body_len=len(BODY),
        request_body_sha256=hashlib.sha256(BODY).hexdigest(),
        response_status=201,
        response_headers=[["content-type", "application/json"]],
        response_body=b'{"id": %d}' % seq,
        response_body_len=12,
        duration_ms=3.5,
        compensation={
            "kind": "delete-created",
            "method": "DELETE",
            "url": f"https://api.example.test/items/{seq}",
        },
    )
    return step.to_row(lambda data: data)


def _timed(undo: Undoproxy, path: str) -> tuple[float, dict[str, object]]:
    started = time.perf_counter()
    answer = undo.api("GET", path, timeout=300)
    return (time.perf_counter() - started) * 1000, answer


def _show_all(undo: Undoproxy) -> float:
    started = time.perf_counter()
    cursor, seen = None, 0
    while True:
        query = "?limit=1000" + (f"&cursor={cursor}" if cursor else "")
        answer = undo.api("GET", f"/api/sessions/big{query}", timeout=300)
        seen += len(answer["steps"])
        cursor = answer["next"]
        if not cursor:
            break
    if seen != BIG:
        raise BrokenRun(f"show big: {seen} steps, expected {BIG}")
    return (time.perf_counter() - started) * 1000


_VERIFY = (
    "import resource, subprocess, sys\n"
    "done = subprocess.run(sys.argv[1:], capture_output=True, text=True)\n"
    "print(done.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n"
    "print(done.stdout.splitlines()[0] if done.stdout else done.stderr)\n"
)


def _verify(undo: Undoproxy) -> tuple[float, float]:
    """`undoproxy verify`: (ms, peak RSS MiB of the verify process)."""
    started = time.perf_counter()
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            _VERIFY,
            sys.executable,
            "-m",
            "undoproxy",
            "verify",
            "-c",
            str(undo.config_path),
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=1800,
    )
    elapsed = (time.perf_counter() - started) * 1000
    first, _, said = done.stdout.partition("\n")
    code, peak = first.split()
    if code != "0":
        raise BrokenRun(f"undoproxy verify failed on the filled journal: {said.strip()}")
    return elapsed, int(peak) / 1024


def measure(workdir: Path, steps: int, rounds: int) -> dict[str, float]:
    """Fill a journal of `steps` steps, open it, and take each figure (best of `rounds`)."""
    directory = workdir / f"steps-{steps}"
    directory.mkdir(parents=True, exist_ok=True)
    fill(directory / "journal.db", steps)
    figures: dict[str, list[float]] = {"list": [], "show": [], "verify": [], "verify_rss": []}
    with Undoproxy(directory) as undo:
        listed = undo.api("GET", "/api/sessions")
        if listed["total"] != SESSIONS:
            raise BrokenRun(f"journal of {steps} steps lists {listed['total']} sessions")
        big = next(s for s in listed["sessions"] if s["id"] == "big")
        if big["steps"] != BIG:
            raise BrokenRun(f"big has {big['steps']} steps counted, expected {BIG}")
        for _ in range(rounds):
            figures["list"].append(_timed(undo, "/api/sessions")[0])
            figures["show"].append(_show_all(undo))
        rss = undo.rss_mb()
        for _ in range(max(1, rounds // 3)):
            elapsed, peak = _verify(undo)
            figures["verify"].append(elapsed)
            figures["verify_rss"].append(peak)
    return {
        "list": min(figures["list"]),
        "show": min(figures["show"]),
        "rss": rss,
        "verify": median(figures["verify"]),
        "verify_rss": max(figures["verify_rss"]),
    }


def run(workdir: Path, rounds: int) -> list[Row]:
    """The rows: listing, show, server RSS, verify time and verify memory, 1e5 / 1e4."""
    small, large = (measure(workdir, n, rounds) for n in SIZES)

    def row(case: str, key: str, shown: str, goal: float | None) -> Row:
        value = large[key] / small[key] if small[key] else 0.0
        fmt = ms if shown == "ms" else (lambda v: f"{v:.0f} MiB")
        return Row(
            NAME,
            case,
            bare=fmt(small[key]),
            undoproxy=fmt(large[key]),
            ratio=ratio(value),
            goal=f"<= {goal:.2f}x" if goal else "-",
            met=verdict(value <= goal) if goal else "-",
        )

    return [
        row("list sessions 1e4 -> 1e5 steps", "list", "ms", GOAL_LIST),
        row("show 1e4-step session (all pages)", "show", "ms", GOAL_FLAT),
        row("undoproxy RSS after show", "rss", "mb", GOAL_FLAT),
        row("verify time", "verify", "ms", None),
        row("verify peak RSS", "verify_rss", "mb", GOAL_FLAT),
    ]
