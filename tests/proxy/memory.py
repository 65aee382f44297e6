"""How much memory a running `undoproxy run` has used: its peak resident size (VmHWM)."""

from __future__ import annotations

from pathlib import Path

from tests.support.proc import Undoproxy

MiB = 1024 * 1024


def peak_rss(proxy: Undoproxy) -> int:
    """The proxy process's highest resident set size so far, in bytes (Linux /proc)."""
    assert proxy.proc is not None
    for line in Path(f"/proc/{proxy.proc.pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM in /proc/PID/status")
