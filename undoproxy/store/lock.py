"""One undoproxy per journal: an exclusive lock on `<journal>.lock` for as long as it runs.

Two processes writing one journal would corrupt each other's steps (the second's crash
recovery turns the first's `pending` mutations into `unknown`), so the second refuses to start
and names the first. The lock is a `flock` on a side file that also holds the owner's pid: the
kernel releases it when the owner exits, however it exits, so a lock left by a crashed process
(its pid is dead) is simply taken over. The file is never deleted (deleting it would let two
processes lock two different files of the same name).
"""

from __future__ import annotations

import fcntl
import logging
import os
from pathlib import Path

from undoproxy.errors import UndoproxyError

log = logging.getLogger(__name__)


class JournalInUse(UndoproxyError):
    """Another process holds the journal; `pid` is its process id when known."""

    def __init__(self, journal: Path, pid: int | None) -> None:
        self.journal, self.pid = journal, pid
        holder = f"another undoproxy (pid {pid})" if pid else "another process"
        super().__init__(
            f"the journal {journal} is in use by {holder}; stop it first, "
            "or give this undoproxy another store.path"
        )


class JournalLock:
    """Held while this process owns a journal: `acquire()` it before opening, `release()` after."""

    def __init__(self, path: Path, fd: int) -> None:
        self.path = path
        self._fd: int | None = fd

    @classmethod
    def acquire(cls, journal: Path) -> JournalLock:
        """Lock `journal` for this process; JournalInUse if another one holds it."""
        path = lock_path(journal)
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except OSError as exc:
            raise UndoproxyError(f"cannot create the journal lock {path}: {exc.strerror}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read_pid(fd)
            os.close(fd)
            raise JournalInUse(journal, holder) from None
        except OSError as exc:
            os.close(fd)
            raise UndoproxyError(f"cannot lock the journal {journal}: {exc.strerror}") from None
        previous = _read_pid(fd)
        if previous and previous != os.getpid():
            log.info("journal lock taken over from pid %d, which is no longer running", previous)
        os.fchmod(fd, 0o600)
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        return cls(path, fd)

    def release(self) -> None:
        """Give the journal up (idempotent); the pid is cleared so nobody is named later."""
        if self._fd is None:
            return
        fd, self._fd = self._fd, None
        try:
            os.ftruncate(fd, 0)
            fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)


def lock_path(journal: Path) -> Path:
    """The lock file of a journal: `<journal>.lock` next to it."""
    return journal.with_name(journal.name + ".lock")


def holder(journal: Path) -> int | None:
    """The pid recorded in a journal's lock file, if any (whether or not it still holds it)."""
    try:
        fd = os.open(lock_path(journal), os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    try:
        return _read_pid(fd)
    finally:
        os.close(fd)


def _read_pid(fd: int) -> int | None:
    text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    return int(text) if text.isdigit() else None
