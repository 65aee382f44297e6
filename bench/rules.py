"""`rules`: matches per second with 10 and 1,000 rules, from bench/rules_match.py's `main()`.

`main()` prints its own small table and returns its rows as dicts
(`{"bench", "case", "value", "unit"}`); here its output is silenced and its rows join the
one table. Matching runs in this process: no proxy is involved.
"""

from __future__ import annotations

import contextlib
import io
import sys
from typing import Any

from report import Row, ratio


def to_row(found: dict[str, Any]) -> Row:
    """One of rules_match's rows in the table's shape."""
    value, unit = found.get("value"), found.get("unit")
    row = Row(str(found.get("bench", "rules")), str(found.get("case", "")))
    if unit == "ratio" and isinstance(value, int | float):
        row.ratio = ratio(value)
    elif isinstance(value, int | float):
        row.undoproxy = f"{value:,.0f} {unit or ''}".strip()
    else:
        row.undoproxy = f"{value} {unit or ''}".strip()
    return row


def run() -> list[Row]:
    """Run rules_match.main() quietly and return its rows."""
    import rules_match  # the rules engineer's benchmark, in this directory

    argv, sys.argv = sys.argv, [rules_match.__file__]  # in case it ever parses arguments
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            found = rules_match.main()
    finally:
        sys.argv = argv
    if not isinstance(found, list) or not found:
        raise RuntimeError(f"bench/rules_match.py main() returned {found!r}, not a list of rows")
    return [to_row(r) for r in found]
