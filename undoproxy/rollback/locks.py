"""WebDAV locks the session itself holds, for the compensations that meet them (pure).

An agent that LOCKs a file and then writes it sends its lock token with the write (`If:`).
Rollback undoes the write first (LIFO) while the lock still holds, so the server refuses the
undo with 423 Locked; the LOCK's own undo (an UNLOCK) comes after. A compensation answered 423
is therefore sent once more with the tokens of the session's own locks that cover its URL, as
the agent's write was. A lock released since makes that token stale, but then no 423 comes.
"""

from __future__ import annotations

from collections.abc import Iterable

from undoproxy.compensators.record import CompensationRecord
from undoproxy.store.records import Step

Lock = tuple[str, str]  # (the locked URL, its token without <>)


def session_locks(steps: Iterable[Step]) -> list[Lock]:
    """The locks the session's LOCK steps took, from their UNLOCK compensations."""
    out: list[Lock] = []
    for step in steps:
        request = CompensationRecord.of(step.compensation).request
        if request is None or request.method != "UNLOCK":
            continue
        token = next((v for k, v in request.headers.items() if k.lower() == "lock-token"), "")
        token = token.strip().strip("<>").strip()
        if token:
            out.append((request.url, token))
    return out


def _covers(lock_url: str, url: str) -> bool:
    root = lock_url.rstrip("/")
    return url.rstrip("/") == root or url.startswith(root + "/")


def if_header(url: str, locks: list[Lock]) -> str | None:
    """An `If:` header submitting every session lock that covers `url`, or None."""
    tokens = list(dict.fromkeys(t for u, t in locks if _covers(u, url)))
    return " ".join(f"(<{t}>)" for t in tokens) or None
