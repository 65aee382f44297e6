"""`llm`: a streamed chat completion's time to first chunk, direct, via mitmdump, via undoproxy.

The upstream (`POST /v1/chat/completions?delay_ms=300` of bench/upstream.py) answers an
OpenAI-style `text/event-stream`: the first chunk at once, the rest 300 ms later. undoproxy
runs as deployed, every built-in pack on, the `llm` pack put on the upstream's host (as for
an OpenAI-compatible gateway), so each call is `llm/openai-chat`: a read, streamed, its
model and usage recorded. The client (its own process, `python bench/llm.py SPEC_JSON`)
sends REQUESTS calls one after the other over one keep-alive HTTPS connection after one
warm-up call, and times the first chunk and the end of each stream.

Bare mitmdump runs with `stream_large_bodies=1`: by default it buffers every body, and the
first chunk would wait for the last (300 ms). Rows: time to first chunk (median of a round;
each path's best round) direct, bare and undoproxy, with what undoproxy adds over bare (goal
from issue 12: <= +5 ms) and its ratio to direct; the first chunk against the last through
undoproxy (streamed, not buffered: the first must come well before the upstream's 300 ms
pause ends). Afterwards undoproxy's sessions must hold one `llm/openai-chat` read per call
with its usage recorded, else the run is broken.
"""

from __future__ import annotations

import asyncio
import json
import ssl
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import aiohttp
import noise
from harness import BENCH, BrokenRun, Mitmdump, Undoproxy, Upstream
from paired import RERUNS, Target, targets
from report import NA, Row, ms, ratio, verdict

NAME = "llm"
DELAY_MS = 300  # between the upstream's first chunk and the rest
REQUESTS = 5  # per round, after one warm-up call
ATTEMPTS = 2  # per round, while other processes take more than noise.FOREIGN_LIMIT
GOAL_ADDED_MS = 5.0
BODY = {
    "model": "gpt-4o-mini",
    "stream": True,
    "stream_options": {"include_usage": True},
    "messages": [{"role": "user", "content": "What is the answer?"}],
}


@dataclass
class Spec:
    """One round of the client: where to send, through which proxy, trusting what."""

    url: str
    proxy: str | None
    session: str | None
    cafile: str
    count: int = REQUESTS


@dataclass
class Timing:
    """The medians of one round, in milliseconds from sending the request."""

    first_ms: float
    last_ms: float
    chunks: int
    foreign_cores: float = 0.0


async def _client(spec: Spec) -> Timing:
    tls = ssl.create_default_context(cafile=spec.cafile)
    auth = aiohttp.BasicAuth(spec.session, "x") if spec.session else None
    firsts, lasts, chunks = [], [], 0
    connector = aiohttp.TCPConnector(limit=1, ssl=tls)
    async with aiohttp.ClientSession(connector=connector) as session:
        for n in range(spec.count + 1):  # the first call warms up (TLS, certificates)
            started = time.perf_counter()
            first = None
            async with session.post(
                spec.url, json=BODY, proxy=spec.proxy, proxy_auth=auth
            ) as response:
                if response.status != 200:
                    raise RuntimeError(f"{spec.url} answered {response.status}")
                text = b""
                async for data in response.content.iter_any():
                    if first is None and data:
                        first = time.perf_counter() - started
                    text += data
            last = time.perf_counter() - started
            if not text.rstrip().endswith(b"data: [DONE]") or first is None:
                raise RuntimeError(f"an incomplete stream: {text[-200:]!r}")
            if n:
                firsts.append(first * 1000)
                lasts.append(last * 1000)
                chunks = text.count(b"data: ")
    return Timing(statistics.median(firsts), statistics.median(lasts), chunks)


def measure(target: Target, spec: Spec, sessions: list[str]) -> Timing:
    """One round in a child process, measured again once if others were busy meanwhile.

    Each attempt through undoproxy is a session of its own (listed in `sessions`)."""
    base = spec.session
    for attempt in range(1, ATTEMPTS + 1):
        if base is not None:
            spec.session = f"{base}-a{attempt}"
            sessions.append(spec.session)
        meter = noise.Meter()
        done = subprocess.run(
            [sys.executable, str(BENCH / "llm.py"), json.dumps(asdict(spec))],
            capture_output=True,
            text=True,
            timeout=120,
        )
        if done.returncode != 0:
            raise BrokenRun(f"llm client via {target.name} failed:\n{done.stderr.strip()}")
        timing = Timing(**json.loads(done.stdout))
        timing.foreign_cores = meter.foreign_cores()
        if timing.foreign_cores <= noise.FOREIGN_LIMIT:
            break
        RERUNS.append(
            f"llm stream {target.name}: {timing.foreign_cores:.2f} cores foreign "
            f"(attempt {attempt})"
        )
    return timing


def run(workdir: Path, rounds: int) -> list[Row]:
    """Alternate direct, bare and undoproxy for `rounds` rounds; check undoproxy's journal."""
    from undoproxy.packs import builtin_names

    packs: list[Any] = [
        {"name": "llm", "hosts": ["127.0.0.1"]} if name == "llm" else name
        for name in builtin_names()
    ]
    best: dict[str, Timing] = {}
    sessions: list[str] = []
    with (
        Upstream(workdir / "upstream") as upstream,
        # mitmdump buffers whole bodies unless told to stream them: the fair baseline streams.
        Mitmdump(workdir / "mitmdump", ("stream_large_bodies=1",)) as bare,
        Undoproxy(workdir / "undoproxy", extra={"packs": packs}) as undo,
    ):
        url = f"{upstream.https_url}/v1/chat/completions?delay_ms={DELAY_MS}"
        paths = targets(upstream, bare, undo, session=None)
        for n in range(rounds):
            order = paths if n % 2 == 0 else tuple(reversed(paths))
            for target in order:
                session = f"bench-llm-r{n}" if target.name == "undoproxy" else None
                spec = Spec(url, target.proxy, session, target.cafile)
                timing = measure(target, spec, sessions)
                kept = best.get(target.name)
                if kept is None or timing.first_ms < kept.first_ms:
                    best[target.name] = timing
        recorded = sum(_check(undo, s) for s in sessions)
    return _rows(best, recorded, len(sessions) * (REQUESTS + 1))


def _check(undo: Undoproxy, session: str) -> int:
    """The session's steps: each an `llm/openai-chat` read with usage; BrokenRun otherwise."""
    found = undo.api("GET", f"/api/sessions/{session}")
    steps = found["steps"]
    wrong = [
        (s.get("rule"), s.get("kind"), s.get("status"))
        for s in steps
        if (s.get("rule"), s.get("kind"), s.get("status"))
        != ("llm/openai-chat", "read", "succeeded")
    ]
    if len(steps) != REQUESTS + 1 or wrong:
        raise BrokenRun(f"session {session}: {len(steps)} steps, unexpected {wrong[:3]}")
    return sum(1 for s in steps if (s.get("meta") or {}).get("usage", {}).get("total_tokens"))


def _rows(best: dict[str, Timing], recorded: int, calls: int) -> list[Row]:
    direct, bare, undo = best["direct"], best["bare"], best["undoproxy"]
    added = undo.first_ms - bare.first_ms
    streamed = undo.first_ms < DELAY_MS / 2 and undo.last_ms >= DELAY_MS
    return [
        Row(
            NAME,
            "SSE chat completion: time to first chunk",
            ms(direct.first_ms),
            ms(bare.first_ms),
            ms(undo.first_ms),
            f"{added:+.2f} ms",
            f"<= +{GOAL_ADDED_MS:.2f} ms",
            verdict(added <= GOAL_ADDED_MS),
        ),
        Row(
            NAME,
            "time to first chunk, undoproxy / direct",
            ratio=ratio(undo.first_ms / direct.first_ms),
        ),
        Row(
            NAME,
            f"first chunk vs last ({DELAY_MS} ms apart upstream)",
            ms(direct.last_ms),
            ms(bare.last_ms),
            f"{ms(undo.first_ms)} vs {ms(undo.last_ms)}",
            NA,
            "streamed",
            verdict(streamed),
        ),
        Row(
            NAME,
            "llm/openai-chat reads with usage recorded",
            undoproxy=f"{recorded}/{calls}",
            goal="all",
            met=verdict(recorded == calls),
        ),
    ]


if __name__ == "__main__":
    timing = asyncio.run(_client(Spec(**json.loads(sys.argv[1]))))
    print(json.dumps(asdict(timing)))
