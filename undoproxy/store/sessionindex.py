"""The sessions a journal keeps in memory: every session that is not closed, and the closed
ones used lately.

Every proxied request needs its session's state and flags at once (without a query), so open
sessions live in memory. A closed session (`committed`, `rolled_back`) is final: it leaves
memory, apart from the `CLOSED_KEPT` used most recently (an agent that goes on reading in a
committed session, a page showing it), so that memory holds what is open, not every session
ever seen. Anything not here is read from the journal on demand (`Journal.find_session`).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterator

from undoproxy.store.records import Session

CLOSED_STATES = ("committed", "rolled_back")
CLOSED_KEPT = 1024  # closed sessions kept in memory, the most recently used


class SessionIndex:
    """A mapping of session id -> Session: the open ones, and the closed ones used lately.

    `forgotten` is called with the id of a closed session that leaves memory."""

    def __init__(
        self, *, closed_kept: int = CLOSED_KEPT, forgotten: Callable[[str], None] | None = None
    ) -> None:
        self._open: dict[str, Session] = {}
        self._closed: OrderedDict[str, Session] = OrderedDict()
        self._closed_kept = closed_kept
        self._forgotten = forgotten or (lambda session_id: None)

    def get(self, session_id: str, default: Session | None = None) -> Session | None:
        """The session if it is in memory (a closed one counts as used now)."""
        session = self._open.get(session_id)
        if session is not None:
            return session
        session = self._closed.get(session_id)
        if session is None:
            return default
        self._closed.move_to_end(session_id)
        return session

    def __getitem__(self, session_id: str) -> Session:
        session = self.get(session_id)
        if session is None:
            raise KeyError(session_id)
        return session

    def __setitem__(self, session_id: str, session: Session) -> None:
        self._open.pop(session_id, None)
        self._closed.pop(session_id, None)
        self._put(session)

    def __contains__(self, session_id: object) -> bool:
        return session_id in self._open or session_id in self._closed

    def __len__(self) -> int:
        return len(self._open) + len(self._closed)

    def __iter__(self) -> Iterator[str]:
        yield from list(self._open)
        yield from list(self._closed)

    def values(self) -> list[Session]:
        """Every session in memory: the open ones, then the closed ones kept."""
        return [*self._open.values(), *self._closed.values()]

    def place(self, session: Session) -> None:
        """File a session again after its state changed (a closed one leaves the open ones)."""
        if self._open.get(session.id) is session or self._closed.get(session.id) is session:
            self[session.id] = session

    def discard(self, session_id: str) -> None:
        """Forget a session that is no longer in the journal (archived)."""
        self._open.pop(session_id, None)
        if self._closed.pop(session_id, None) is not None:
            self._forgotten(session_id)

    @property
    def open_count(self) -> int:
        """How many sessions in memory are not closed."""
        return len(self._open)

    def _put(self, session: Session) -> None:
        if session.state not in CLOSED_STATES:
            self._open[session.id] = session
            return
        self._closed[session.id] = session
        while len(self._closed) > self._closed_kept:
            gone, _ = self._closed.popitem(last=False)
            self._forgotten(gone)
