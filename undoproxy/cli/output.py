"""How commands print: plain lines, aligned tables, times and counts."""

from __future__ import annotations

import sys
import time


def out(text: str = "") -> None:
    """A line on stdout, flushed (a command's output may be piped while it streams)."""
    print(text, flush=True)


def err(text: str = "") -> None:
    """A line on stderr, flushed (exec keeps stdout for the command it runs)."""
    print(text, file=sys.stderr, flush=True)


def when(ts: float | None) -> str:
    """A timestamp as local date and time, `-` when there is none."""
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts)) if ts else "-"


def count(n: int, noun: str) -> str:
    """`1 request`, `2 requests`."""
    return f"{n} {noun}{'' if n == 1 else 's'}"


def table(rows: list[list[str]], header: list[str]) -> str:
    """Rows under a header, each column as wide as its widest cell."""
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    lines = ["  ".join(str(c).ljust(w) for c, w in zip(header, widths, strict=True)).rstrip()]
    lines += [
        "  ".join(str(c).ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows
    ]
    return "\n".join(lines)
