"""Durations as written in config: `300s`, `5m`, `1h`, `30d`, `250ms` or a number of seconds."""

from __future__ import annotations

import re

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_PATTERN = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$")


def parse_duration(value: object) -> float:
    """Seconds for `value`; raises ValueError with a readable message when it is not a duration."""
    if isinstance(value, bool):
        raise ValueError(f"expected a duration like 300s or 5m, got {value!r}")
    if isinstance(value, int | float):
        if value < 0:
            raise ValueError(f"a duration cannot be negative: {value}")
        return float(value)
    if isinstance(value, str):
        m = _PATTERN.match(value)
        if m:
            return float(m.group(1)) * _UNITS[m.group(2) or "s"]
    raise ValueError(f"expected a duration like 300s, 5m, 1h or 30d, got {value!r}")
