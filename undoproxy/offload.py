"""Work on large bodies taken off the event loop, in order: hashing them, sealing them to disk.

Every byte of a large transfer is hashed (SHA-256, for the journal) and, for a spooled upload,
encrypted and written to a file. SHA-256 runs at about 600 MB/s on these machines: done on the
event loop it would cost a 500 MB download most of a second of the proxy's only thread. OpenSSL
releases the GIL while it hashes or encrypts a large piece, so one worker thread does both
beside the event loop, on the other core.

`InOrder` hands one body's pieces to the workers in the order they came, gathered into
batches of `BATCH` bytes or more (a thread hop per 32 KiB read would cost more than it saves),
and never lets more than `MAX_PENDING` batches wait (past that, the caller waits for the
oldest: memory stays bounded, and a disk that cannot keep up slows the transfer down).
`done()` hands over the last batch, waits for the rest and raises what the work raised (an
OSError from a full disk, say). Small pieces (SSE events) are handled inline until the first
large one. A body that is both hashed and sealed gives each batch to two works, each on its
own worker thread (`HASHING`, `STORING`): the hash of one batch runs while the one before is
encrypted and written, so a spooled upload is not held to the speed of one thread.
"""

from __future__ import annotations

import hashlib
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Final

OFFLOAD_OVER: Final = 16 * 1024  # bytes: smaller pieces are handled inline (until a larger one)
BATCH: Final = 256 * 1024  # bytes handed to the worker at once
MAX_PENDING: Final = 16  # batches of one body waiting for the worker (at most 4 MiB)

# One thread per kind of work: each runs its works in the order they were submitted.
HASHING = ThreadPoolExecutor(max_workers=1, thread_name_prefix="undoproxy-hashing")
STORING = ThreadPoolExecutor(max_workers=1, thread_name_prefix="undoproxy-storing")

Work = Callable[[bytes | bytearray], None]


class InOrder:
    """Runs each `work(piece)` for each piece, in order: inline while pieces are small, else
    each work on its own worker thread (see the module docstring). `works` pairs each work
    with its worker; a bare callable runs on `HASHING`."""

    def __init__(
        self,
        *works: Work | tuple[Work, ThreadPoolExecutor],
        batch: int = BATCH,
    ) -> None:
        self._works = [w if isinstance(w, tuple) else (w, HASHING) for w in works]
        self._size = batch
        self._pending: deque[list[Future[None]]] = deque()
        self._batch = bytearray()
        self._offloaded = False

    def add(self, piece: bytes) -> None:
        """Process `piece` after the ones before it (raises what earlier work raised)."""
        if not self._offloaded and len(piece) < OFFLOAD_OVER:
            for work, _ in self._works:
                work(piece)
            return
        self._offloaded = True
        self._batch += piece
        if len(self._batch) >= self._size:
            self._hand_over()

    def _hand_over(self) -> None:
        batch, self._batch = self._batch, bytearray()  # handed over whole: never touched again
        self._pending.append([worker.submit(work, batch) for work, worker in self._works])
        while len(self._pending) > MAX_PENDING:
            self._wait(self._pending.popleft())

    def done(self) -> None:
        """Wait until every piece is processed (raises what the work raised)."""
        if self._batch:
            self._hand_over()
        while self._pending:
            self._wait(self._pending.popleft())

    @staticmethod
    def _wait(futures: list[Future[None]]) -> None:
        for future in futures:
            future.result()


class StreamDigest:
    """The SHA-256 of a body as it passes, computed beside the event loop for large ones."""

    def __init__(self) -> None:
        self._hash = hashlib.sha256()
        self._queue = InOrder(self._hash.update)

    def update(self, piece: bytes) -> None:
        """Add a piece of the body."""
        if piece:
            self._queue.add(piece)

    def hexdigest(self) -> str:
        """The digest of every piece so far (waits for the worker to catch up)."""
        self._queue.done()
        return self._hash.hexdigest()
