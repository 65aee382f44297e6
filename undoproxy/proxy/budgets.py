"""Budgets and loop detection per session (`guard:` in the config and in rules).

Counts live in memory (exact in one process); a session's total of forwarded mutations is
loaded from the journal at start, so `max_mutations` survives a restart. On a shared journal
the database has the last word: each mutation's write-ahead is fenced on the same limits
counted over every replica's steps (`limits`, `PgJournal.write_ahead`). The per-minute window
and the repeat history start afresh at a restart: both are about the last minutes. A mutation
counts once it is on its way upstream (allowed, or held and approved); a refused one does
not. Repeats count every attempt, refused ones included: an agent that keeps retrying a
denied write is in a loop too.

Not an addon: the Gate asks `check()` before deciding and `record()` once a mutation goes on.
"""

from __future__ import annotations

import hashlib
import time
from collections import defaultdict, deque
from dataclasses import dataclass

from undoproxy.rules import Rule
from undoproxy.rules.guards import Guard, RepeatGuard
from undoproxy.store.base import Limit
from undoproxy.store.journal import Journal

Scope = tuple[str, str | None]  # (session, rule name or None for the whole session)
MINUTE = 60.0
MAX_TRACKED = 100_000  # repeat keys kept at most; the oldest windows are dropped first


@dataclass(frozen=True)
class OverBudget:
    """A limit a mutation would exceed."""

    limit: str  # max_mutations | max_mutations_per_minute
    value: int
    scope: str  # "session" or "rule NAME"

    def message(self) -> str:
        """What the agent is told."""
        per = " in any minute" if self.limit == "max_mutations_per_minute" else ""
        return (
            f"this {self.scope} may make at most {self.value} mutation"
            f"{'' if self.value == 1 else 's'}{per} (guard.{self.limit})"
        )


@dataclass(frozen=True)
class Repeated:
    """The same write again, more often than `guard.repeat` allows."""

    times: int
    window: float

    def message(self) -> str:
        """What the approval says."""
        return f"repeated {self.times} times in {self.window:g}s: likely a loop"


class Budgets:
    """Per-session counters behind `guard:`."""

    def __init__(self, guard: Guard, journal: Journal | None = None) -> None:
        self.guard = guard
        self.journal = journal
        self._total: dict[Scope, int] = defaultdict(int)
        self._recent: dict[Scope, deque[float]] = defaultdict(deque)
        self._repeats: dict[tuple[str, str], deque[float]] = {}

    async def load(self) -> None:
        """Totals of forwarded mutations per session (and per session and rule) so far."""
        if self.journal is None:
            return
        rows = await self.journal.query(
            "SELECT session_id, rule, count(*) AS n FROM steps WHERE is_mutation=1 "
            "AND status NOT IN ('held', 'denied') GROUP BY session_id, rule"
        )
        for row in rows:
            self._total[(row["session_id"], None)] += row["n"]
            if row["rule"] is not None:
                self._total[(row["session_id"], row["rule"])] += row["n"]

    def _scopes(self, session: str, rule: Rule | None) -> list[tuple[Guard, Scope]]:
        scopes: list[tuple[Guard, Scope]] = [(self.guard, (session, None))]
        if rule is not None and rule.guard is not None:
            scopes.append((rule.guard, (session, rule.name)))
        return scopes

    def over(self, session: str, rule: Rule | None) -> OverBudget | None:
        """The first limit one more mutation would exceed, if any."""
        now = time.monotonic()
        for guard, key in self._scopes(session, rule):
            scope = "session" if key[1] is None else f"rule {key[1]}"
            if guard.max_mutations and self._total[key] >= guard.max_mutations:
                return OverBudget("max_mutations", guard.max_mutations, scope)
            if guard.max_mutations_per_minute:
                recent = self._recent[key]
                while recent and recent[0] <= now - MINUTE:
                    recent.popleft()
                if len(recent) >= guard.max_mutations_per_minute:
                    return OverBudget(
                        "max_mutations_per_minute", guard.max_mutations_per_minute, scope
                    )
        return None

    def limits(self, rule: Rule | None) -> list[Limit]:
        """The budgets a mutation under `rule` counts against, for a shared journal to fence
        its write-ahead on (every replica's mutations count there, not only this one's)."""
        out: list[Limit] = []
        for guard, (_, name) in self._scopes("", rule):
            if guard.max_mutations:
                out.append((name, "max_mutations", guard.max_mutations))
            if guard.max_mutations_per_minute:
                out.append((name, "max_mutations_per_minute", guard.max_mutations_per_minute))
        return out

    def record(self, session: str, rule: Rule | None) -> None:
        """One more mutation of this session went on its way upstream."""
        now = time.monotonic()
        for _, key in self._scopes(session, rule):
            self._total[key] += 1
            self._recent[key].append(now)

    def _repeat(self, rule: Rule | None) -> RepeatGuard:
        """The repeat guard that counts mutations under `rule`: the rule's own, if it sets
        one, else the top-level one (`count` 0: none)."""
        if rule is not None and rule.guard is not None and rule.guard.repeat.count:
            return rule.guard.repeat
        return self.guard.repeat

    def compares_bodies(self, rule: Rule | None) -> bool:
        """True when a repeat guard counts mutations under `rule` (by method, URL and body)."""
        return bool(self._repeat(rule).count)

    def repeated(
        self, session: str, rule: Rule | None, method: str, url: str, body: bytes
    ) -> Repeated | None:
        """Note this attempt; a Repeated when it is one too many within the window."""
        repeat = self._repeat(rule)
        if not repeat.count:
            return None
        digest = hashlib.sha256(f"{method}\n{url}\n".encode() + body).hexdigest()
        key = (session, digest)
        now = time.monotonic()
        times = self._repeats.get(key)
        if times is None:
            if len(self._repeats) >= MAX_TRACKED:
                self._repeats.pop(next(iter(self._repeats)))
            times = self._repeats[key] = deque()
        while times and times[0] <= now - repeat.window:
            times.popleft()
        times.append(now)
        if len(times) > repeat.count:
            return Repeated(len(times), repeat.window)
        return None
