"""The one table `make bench` prints, and the small number helpers every benchmark shares."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

HEADER = ("benchmark", "case", "direct", "bare mitmproxy", "undoproxy", "ratio", "goal", "met?")
NA = "-"


@dataclass
class Row:
    """One line of the table; numbers are already formatted."""

    benchmark: str
    case: str
    direct: str = NA
    bare: str = NA
    undoproxy: str = NA
    ratio: str = NA
    goal: str = NA
    met: str = NA

    def cells(self) -> tuple[str, ...]:
        """The row in column order."""
        return (
            self.benchmark,
            self.case,
            self.direct,
            self.bare,
            self.undoproxy,
            self.ratio,
            self.goal,
            self.met,
        )


def unavailable(benchmark: str, why: str) -> Row:
    """The row of a benchmark whose feature is not implemented yet."""
    return Row(benchmark, f"not available: {why}")


def render(rows: Sequence[Row]) -> str:
    """A plain-text table, columns padded, numbers right-aligned."""
    table = [HEADER, *(r.cells() for r in rows)]
    widths = [max(len(line[i]) for line in table) for i in range(len(HEADER))]
    numeric = {2, 3, 4, 5}

    def line(cells: Sequence[str]) -> str:
        out = []
        for i, (cell, width) in enumerate(zip(cells, widths, strict=True)):
            right = i in numeric and cells is not HEADER
            out.append(cell.rjust(width) if right else cell.ljust(width))
        return "  ".join(out).rstrip()

    rule = "  ".join("-" * w for w in widths)
    return "\n".join([line(HEADER), rule, *(line(r.cells()) for r in rows)])


def median(values: Sequence[float]) -> float:
    """The median of some rounds."""
    return float(statistics.median(values)) if values else 0.0


def rps(value: float) -> str:
    """Requests per second, formatted."""
    return f"{value:,.0f}/s"


def ms(value: float) -> str:
    """Milliseconds, formatted."""
    return f"{value:.2f} ms"


def ratio(value: float) -> str:
    """A ratio such as 0.97x."""
    return f"{value:.2f}x"


def verdict(ok: bool) -> str:
    """The met? column."""
    return "yes" if ok else "NO"
