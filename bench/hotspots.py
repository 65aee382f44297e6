"""Where undoproxy's time goes under a load: py-spy on the proxy, summarised per request.

    .venv/bin/pip install py-spy                       # not a dependency of undoproxy
    .venv/bin/python bench/hotspots.py                  # GET, HTTPS, 32 clients, undoproxy
    .venv/bin/python bench/hotspots.py --method POST --concurrency 1
    .venv/bin/python bench/hotspots.py --bare           # the same load through mitmdump

Prints the proxy's sampled time per request split into our code (by the outermost undoproxy
function on the stack), mitmproxy's hook dispatch, the journal's sqlite thread and the rest
(mitmproxy's own proxying, TLS, asyncio), and keeps the raw py-spy output for a flame graph.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import load
import mutations
import passthrough
from harness import BrokenRun, Child, Mitmdump, Undoproxy, Upstream
from load import LoadSpec

RATE = 250  # samples per second
OURS = re.compile(r"^(\S+) \((undoproxy/[^:]+)")
SKIP = (
    "undoproxy/__main__.py",
    "undoproxy/cli/",
    "undoproxy/server.py",
    "undoproxy/eventloop.py",
)  # the loop
DISPATCH = ("AddonManager.trigger_event", "AddonManager.invoke_addon", "handle_lifecycle")


def summarise(raw: Path, requests: int) -> str:
    """The per-request breakdown of py-spy's raw (collapsed) samples."""
    parts: Counter[str] = Counter()
    ours: Counter[str] = Counter()
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        n, frames = int(count), stack.split(";")
        mine = [f for f in frames if "(undoproxy/" in f and not any(x in f for x in SKIP)]
        if frames[0].startswith("Thread._bootstrap"):
            parts["journal's sqlite thread (aiosqlite, waiting included)"] += n
        elif mine:
            parts["undoproxy's own code"] += n
            found = OURS.match(mine[0])
            ours[f"{found[1]} ({found[2]})" if found else mine[0]] += n
        elif any(name in f for f in frames for name in DISPATCH):
            parts["mitmproxy hook dispatch"] += n
        else:
            parts["mitmproxy's proxying, TLS, asyncio"] += n

    def us(samples: int) -> str:
        return f"{samples / RATE / max(1, requests) * 1e6:7.0f} us/req"

    total = sum(parts.values())
    lines = [f"{requests} requests, {total} samples at {RATE}/s: {us(total)}"]
    lines += [f"  {us(n)}  {n / total:6.1%}  {what}" for what, n in parts.most_common()]
    lines.append("  undoproxy's own code by outermost function:")
    lines += [f"    {us(n)}  {fn}" for fn, n in ours.most_common(15)]
    return "\n".join(lines)


def main() -> int:
    """Start an upstream and a proxy, load it, profile it, print the breakdown."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--method", choices=("GET", "POST"), default="GET")
    parser.add_argument("--scheme", choices=("http", "https"), default="https")
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--seconds", type=int, default=10)
    parser.add_argument("--bare", action="store_true", help="profile mitmdump instead")
    parser.add_argument("--out", default="hotspots.txt", help="py-spy's raw output")
    args = parser.parse_args()
    spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    if not Path(spy).exists():
        print("py-spy is not installed: .venv/bin/pip install py-spy", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="undoproxy-hotspots-") as tmp:
        work = Path(tmp)
        with Upstream(work / "upstream") as upstream:
            rules = mutations.RULES if args.method == "POST" else passthrough.RULES
            proxy: Mitmdump | Undoproxy
            proxy = Mitmdump(work / "bare") if args.bare else Undoproxy(work / "undoproxy", rules)
            with proxy:
                return _profile(args, spy, upstream, proxy)


def _profile(args: argparse.Namespace, spy: str, upstream: Upstream, proxy: Child) -> int:
    path = "/items" if args.method == "POST" else "/small"
    assert isinstance(proxy, Mitmdump | Undoproxy)
    spec = LoadSpec(
        url=upstream.base(args.scheme) + path,
        method=args.method,
        json_body=args.method == "POST",
        proxy=proxy.proxy_url,
        session=None if args.bare else "hotspots",
        cafile=proxy.cafile if args.scheme == "https" else None,
        concurrency=args.concurrency,
        warmup=1.0,
        duration=args.seconds + 2.0,  # the profile covers the middle `seconds`
    )
    child = load.start(spec)
    time.sleep(1.5)
    argv = [spy, "record", "-p", str(proxy.proc.pid), "-d", str(args.seconds)]
    argv += ["-r", str(RATE), "-f", "raw", "-o", args.out, "--nonblocking"]
    subprocess.run(argv, check=True, capture_output=True)
    result = load.finish(child)
    if result.errors:
        raise BrokenRun(f"the load failed: {result.first_error}")
    name = "mitmdump" if args.bare else "undoproxy"
    print(f"{name}: {args.method} {args.scheme} c={args.concurrency}: {result.rps:,.0f} req/s")
    print(summarise(Path(args.out), round(result.rps * args.seconds)))
    print(f"raw samples: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
