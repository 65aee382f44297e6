"""An in-process event bus: the journal publishes step, approval and session changes; the
admin page's `GET /api/events` stream subscribes, and `/metrics` listens. Publishing with no
subscriber and no listener costs a check.

On a shared journal (PostgreSQL) events also come from other replicas: the journal hands each
to `arrived()`, whose remote listeners act on it (the approvals queue releases a request it
holds), and re-publishes it with `remote=True`: subscribers (the page) see every replica's
events; listeners (metrics, the relay to other replicas) see only this replica's own."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)
Listener = Callable[[str, dict[str, Any]], None]


@dataclass(frozen=True)
class Event:
    """One change: kind is `step`, `approval` or `session`; data is its JSON summary."""

    kind: str
    data: dict[str, Any]


class EventBus:
    """Fan-out of events to synchronous listeners and to bounded subscriber queues."""

    def __init__(self, queue_size: int = 1000) -> None:
        self._subscribers: set[asyncio.Queue[Event]] = set()
        self._listeners: list[Listener] = []
        self._remote: list[Listener] = []
        self._queue_size = queue_size

    def publish(self, kind: str, data: dict[str, Any], *, remote: bool = False) -> None:
        """Deliver to every subscriber; a subscriber that fell behind loses its oldest event.

        `remote`: the event happened on another replica; listeners do not get it."""
        for listener in () if remote else self._listeners:
            try:
                listener(kind, data)
            except Exception:  # a listener's bug must never fail the publisher (the proxy)
                log.exception("event listener %r failed on a %s event", listener, kind)
        if not self._subscribers:
            return
        event = Event(kind, data)
        for q in self._subscribers:
            if q.full():
                with contextlib.suppress(asyncio.QueueEmpty):
                    q.get_nowait()
            q.put_nowait(event)

    def listen(self, listener: Listener) -> Callable[[], None]:
        """Call `listener(kind, data)` synchronously on every event, none lost; returns the
        function that stops it. The listener runs in the publisher's path: it must be cheap
        and must not block (metrics counters, not I/O)."""
        self._listeners.append(listener)
        return lambda: self._listeners.remove(listener)

    def listen_remote(self, listener: Listener) -> Callable[[], None]:
        """Call `listener(kind, data)` on every event from another replica (`arrived`)."""
        self._remote.append(listener)
        return lambda: self._remote.remove(listener)

    def arrived(self, kind: str, data: dict[str, Any]) -> None:
        """An event from another replica: remote listeners act on it (nothing re-published)."""
        for listener in self._remote:
            try:
                listener(kind, data)
            except Exception:
                log.exception("remote event listener %r failed on a %s event", listener, kind)

    @contextlib.asynccontextmanager
    async def subscribe(self) -> AsyncIterator[asyncio.Queue[Event]]:
        """A queue receiving every event published while the context is open."""
        q: asyncio.Queue[Event] = asyncio.Queue(self._queue_size)
        self._subscribers.add(q)
        try:
            yield q
        finally:
            self._subscribers.discard(q)
