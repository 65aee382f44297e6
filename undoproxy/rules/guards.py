"""Budgets and loop detection: how many mutations a session (or one rule's matches in it) may
make, and how often the same write may repeat before it is held as a likely loop.

Plain data, parsed once; `config.yaml`'s `guard:` and a rule's own `guard:` share this shape:

    guard:
      max_mutations: 0               # in all, per session (0 = no limit)
      max_mutations_per_minute: 0    # in any 60 s, per session
      repeat: {count: 0, window: 60s}  # the same method + URL + body more than `count` times
                                       # within `window` is held (count 0 = off)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from undoproxy.durations import parse_duration

GUARD_KEYS = frozenset({"max_mutations", "max_mutations_per_minute", "repeat"})
REPEAT_KEYS = frozenset({"count", "window"})


@dataclass(frozen=True)
class RepeatGuard:
    """Hold the (count + 1)th identical mutation within `window` seconds (count 0: off)."""

    count: int = 0
    window: float = 60.0


@dataclass(frozen=True)
class Guard:
    """Limits for one scope (the session, or one rule's matches within a session)."""

    max_mutations: int = 0
    max_mutations_per_minute: int = 0
    repeat: RepeatGuard = field(default_factory=RepeatGuard)

    @property
    def active(self) -> bool:
        """True when any limit is set."""
        return bool(self.max_mutations or self.max_mutations_per_minute or self.repeat.count)


def parse_count(value: Any, name: str) -> int:
    """A limit: a whole number, 0 or more (0 = no limit); raises ValueError."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{name}: expected a whole number, 0 or more (0 = no limit): {value!r}")
    return value


def parse_repeat(value: Any) -> RepeatGuard:
    """`{count, window}` -> RepeatGuard; raises ValueError saying what is wrong."""
    if not isinstance(value, dict):
        raise ValueError("repeat: expected a mapping {count: N, window: DURATION}")
    unknown = set(value) - REPEAT_KEYS
    if unknown:
        raise ValueError(f"repeat: unknown key(s) {', '.join(sorted(map(str, unknown)))}")
    window = parse_duration(value.get("window", "60s"))
    if window <= 0:
        raise ValueError("repeat.window must be more than zero")
    return RepeatGuard(parse_count(value.get("count", 0), "repeat.count"), window)


def parse_guard(value: Any) -> Guard:
    """A `guard:` mapping -> Guard; raises ValueError saying what is wrong."""
    if not isinstance(value, dict):
        raise ValueError("guard: expected a mapping of " + ", ".join(sorted(GUARD_KEYS)))
    unknown = set(value) - GUARD_KEYS
    if unknown:
        raise ValueError(
            f"guard: unknown key(s) {', '.join(sorted(map(str, unknown)))} "
            f"(known: {', '.join(sorted(GUARD_KEYS))})"
        )
    return Guard(
        parse_count(value.get("max_mutations", 0), "max_mutations"),
        parse_count(value.get("max_mutations_per_minute", 0), "max_mutations_per_minute"),
        parse_repeat(value["repeat"]) if "repeat" in value else RepeatGuard(),
    )
