"""`transfers`: moving large bodies (issue 23): 200 MB up and 500 MB down, direct, through bare
mitmdump with its streaming option on, and through undoproxy; the proxies' memory meanwhile.

curl (its own process, plain HTTP) uploads a 200 MB file with `PUT /sink/NAME` (read and
thrown away by bench/upstream.py), then downloads 500 MB with `GET /source` (chunked, no
length announced). Bare mitmdump runs with `stream_large_bodies=1m`: both bodies stream
through it, unjudged (an upload reaches the upstream before any hook could hold it).
undoproxy runs with its defaults: the upload is a mutation, judged on its headers before
its body is read (snapshotted: a GET, 404 here; written ahead), then streamed upstream
through the tap that hashes it for the journal (proxy/bounded.py); the download streams
through the same kind of tap.

Rows: each transfer's time (the best of the rounds on each path; rounds alternate bare and
undoproxy), the ratio undoproxy / bare (goal: <= 1.5x); and each proxy's resident memory
above its idle size at its highest while moving both (goal for undoproxy: under 150 MB),
sampled every 10 ms. Afterwards undoproxy's journal must hold each upload with its full
length and each download with its full length, else the run is broken.
"""

from __future__ import annotations

import hashlib
import subprocess
import threading
import time
from pathlib import Path

from harness import BrokenRun, Mitmdump, Undoproxy, Upstream, rss_mb
from report import Row, ratio, verdict

NAME = "transfers"
UP = 200 * 1024 * 1024
DOWN = 500 * 1024 * 1024
GOAL_RATIO = 1.5
GOAL_RSS_MB = 150.0


class PeakRss:
    """Samples a process's resident memory every 10 ms until stopped; the highest seen."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.peak = rss_mb(pid)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        while not self._stop.wait(0.01):
            try:
                self.peak = max(self.peak, rss_mb(self.pid))
            except (OSError, BrokenRun):
                return

    def stop(self) -> float:
        self._stop.set()
        self._thread.join(5)
        return self.peak


def _upload_file(directory: Path) -> Path:
    """A 200 MB file of bytes that do not compress."""
    path = directory / "upload.bin"
    if not path.exists():
        directory.mkdir(parents=True, exist_ok=True)
        block = hashlib.sha256(b"bench").digest() * (1 << 15)  # 1 MiB
        with path.open("wb") as f:
            for i in range(UP // len(block)):
                f.write(block[i % 32 :] + block[: i % 32])
    return path


def _curl(args: list[str], proxy: str | None) -> float:
    """Seconds curl took; BrokenRun when it fails."""
    argv = ["curl", "-sS", "--fail", "-o", "/dev/null", "--max-time", "300"]
    argv += ["--noproxy", "*"] if proxy is None else ["-x", proxy]
    started = time.perf_counter()
    done = subprocess.run([*argv, *args], capture_output=True, text=True, timeout=330)
    took = time.perf_counter() - started
    if done.returncode != 0:
        raise BrokenRun(f"curl {' '.join(args[-1:])} via {proxy or 'direct'}: {done.stderr}")
    return took


def _round(base: str, upload: Path, proxy: str | None, tag: str) -> tuple[float, float]:
    up = _curl(["-T", str(upload), f"{base}/sink/{tag}"], proxy)
    down = _curl([f"{base}/source?size={DOWN}"], proxy)
    return up, down


def run(workdir: Path, rounds: int) -> list[Row]:
    """Direct once, then bare and undoproxy alternating for `rounds` rounds."""
    upload = _upload_file(workdir / "files")
    best: dict[str, list[float]] = {}
    rss: dict[str, float] = {}
    with (
        Upstream(workdir / "upstream") as upstream,
        Mitmdump(workdir / "mitmdump", ("stream_large_bodies=1m",)) as bare,
        Undoproxy(workdir / "undoproxy") as undo,
    ):
        base = upstream.http_url
        best["direct"] = list(_round(base, upload, None, "direct"))
        proxies = {"bare": (bare, bare.proxy_url), "undoproxy": (undo, undo.proxy_url)}
        for name, (proc, url) in proxies.items():  # warm up: certificates, imports, pools
            _curl([f"{base}/small"], url if name == "bare" else _session(url, "bench-warm"))
            rss[f"{name} idle"] = rss_mb(proc.proc.pid)
        for n in range(rounds):
            order = ("bare", "undoproxy") if n % 2 == 0 else ("undoproxy", "bare")
            for name in order:
                proc, url = proxies[name]
                via = url if name == "bare" else _session(url, f"bench-transfers-r{n}")
                peak = PeakRss(proc.proc.pid)
                try:
                    up, down = _round(base, upload, via, f"{name}-{n}")
                finally:
                    top = peak.stop()
                rss[name] = max(rss.get(name, 0.0), top - rss[f"{name} idle"])
                kept = best.get(name) or [up, down]
                best[name] = [min(kept[0], up), min(kept[1], down)]
        _check(undo, rounds)
    return _rows(best, rss)


def _session(proxy_url: str, session: str) -> str:
    return proxy_url.replace("http://", f"http://{session}:x@", 1)


def _check(undo: Undoproxy, rounds: int) -> None:
    """Every upload journaled with its full length, every download with its full length."""
    for n in range(rounds):
        steps = undo.steps(f"bench-transfers-r{n}")
        seen = {(s["method"], (s.get("request") or {}).get("body_length")) for s in steps}
        if ("PUT", UP) not in seen:
            raise BrokenRun(f"round {n}: the upload is not journaled whole: {seen}")
        downloads = [s for s in steps if s["method"] == "GET"]
        lengths = [(s.get("response") or {}).get("body_length") for s in downloads]
        if lengths != [DOWN] or downloads[0]["status"] != "succeeded":
            raise BrokenRun(f"round {n}: the download is journaled as {lengths}")


def _rows(best: dict[str, list[float]], rss: dict[str, float]) -> list[Row]:
    rows = []
    for i, case in enumerate((f"{UP >> 20} MB upload (PUT)", f"{DOWN >> 20} MB download")):
        direct, bare, undo = best["direct"][i], best["bare"][i], best["undoproxy"][i]
        rows.append(
            Row(
                NAME,
                f"{case}: seconds",
                f"{direct:.2f} s",
                f"{bare:.2f} s",
                f"{undo:.2f} s",
                ratio(undo / bare),
                f"<= {GOAL_RATIO:.1f}x",
                verdict(undo / bare <= GOAL_RATIO),
            )
        )
    rows.append(
        Row(
            NAME,
            "proxy RSS above idle while moving both",
            bare=f"{rss['bare']:.0f} MB",
            undoproxy=f"{rss['undoproxy']:.0f} MB",
            goal=f"< {GOAL_RSS_MB:.0f} MB",
            met=verdict(rss["undoproxy"] < GOAL_RSS_MB),
        )
    )
    rows.append(
        Row(
            NAME,
            "idle RSS",
            bare=f"{rss['bare idle']:.0f} MB",
            undoproxy=f"{rss['undoproxy idle']:.0f} MB",
        )
    )
    return rows
