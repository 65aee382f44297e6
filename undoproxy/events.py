"""An in-process event bus: the journal publishes step, approval and session changes; the
admin page's `GET /api/events` stream subscribes. Publishing with no subscriber costs a check."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Event:
    """One change: kind is `step`, `approval` or `session`; data is its JSON summary."""

    kind: str
    data: dict[str, Any]


class EventBus:
    """Fan-out of events to any number of bounded subscriber queues."""

    def __init__(self, queue_size: int = 1000) -> None:
        self._subscribers: set[asyncio.Queue[Event]] = set()
        self._queue_size = queue_size

    def publish(self, kind: str, data: dict[str, Any]) -> None:
        """Deliver to every subscriber; a subscriber that fell behind loses its oldest event."""
        if not self._subscribers:
            return
        event = Event(kind, data)
        for q in self._subscribers:
            if q.full():
                with contextlib.suppress(asyncio.QueueEmpty):
                    q.get_nowait()
            q.put_nowait(event)

    @contextlib.asynccontextmanager
    async def subscribe(self) -> AsyncIterator[asyncio.Queue[Event]]:
        """A queue receiving every event published while the context is open."""
        q: asyncio.Queue[Event] = asyncio.Queue(self._queue_size)
        self._subscribers.add(q)
        try:
            yield q
        finally:
            self._subscribers.discard(q)
