"""Mutations on their way upstream: journaled ahead and forwarded, not yet answered.

The kill switch waits on it: a freeze answers only once no mutation of the frozen session(s)
is still travelling, so "after the freeze answered, nothing more reached the upstream" holds
for the agent's requests as the upstream sees them, not just as the gate saw them.
"""

from __future__ import annotations

import asyncio
from collections import Counter


class InFlight:
    """Counts forwarded-but-unanswered mutations per session."""

    def __init__(self) -> None:
        self._count: Counter[str] = Counter()
        self._changed = asyncio.Event()

    def started(self, session_id: str) -> None:
        """A mutation of `session_id` is being forwarded."""
        self._count[session_id] += 1

    def ended(self, session_id: str) -> None:
        """Its answer (or its error) is in."""
        self._count[session_id] -= 1
        if self._count[session_id] <= 0:
            del self._count[session_id]
        self._changed.set()

    def pending(self, session_id: str | None = None) -> int:
        """How many are in flight (for one session, or for all)."""
        if session_id is None:
            return sum(self._count.values())
        return self._count.get(session_id, 0)

    async def drained(self, session_id: str | None = None, timeout: float = 30.0) -> int:
        """Wait until none is in flight (for one session, or all); how many still are."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while self.pending(session_id):
            self._changed.clear()
            left = deadline - loop.time()
            if left <= 0:
                break
            try:
                await asyncio.wait_for(self._changed.wait(), left)
            except TimeoutError:
                break
        return self.pending(session_id)
