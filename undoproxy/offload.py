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
DIGEST_BATCH: Final = 1024 * 1024  # bytes of pieces a StreamDigest hands over at once
DIGEST_PENDING: Final = 8  # its batches waiting for the worker (at most 8 MiB)

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
    """The SHA-256 of a body as it passes, computed beside the event loop for large ones.

    Unlike `InOrder` it copies nothing on the event loop: the pieces (immutable bytes) are
    handed to `HASHING` as they came, a list of `DIGEST_BATCH` bytes or more at a time, which
    the thread joins (CPython lets go of the GIL while it joins a MiB or more of bytes) and
    hashes at once. Measured on a 200 MB upload (2 cores): joining on the event loop cost it
    about a tenth of its time; a hash call per 64 KiB piece, each taking the GIL back from
    the event loop, cost it as much again.
    """

    def __init__(self) -> None:
        self._hash = hashlib.sha256()
        self._pieces: list[bytes] = []
        self._size = 0
        self._pending: deque[Future[None]] = deque()
        self._offloaded = False

    def update(self, piece: bytes) -> None:
        """Add a piece of the body."""
        if not piece:
            return
        if not self._offloaded and len(piece) < OFFLOAD_OVER:
            self._hash.update(piece)
            return
        self._offloaded = True
        self._pieces.append(piece if type(piece) is bytes else bytes(piece))
        self._size += len(piece)
        if self._size >= DIGEST_BATCH:
            self._hand_over()

    def _hand_over(self) -> None:
        pieces, self._pieces, self._size = self._pieces, [], 0
        self._pending.append(HASHING.submit(self._update, pieces))
        while len(self._pending) > DIGEST_PENDING:
            self._pending.popleft().result()

    def _update(self, pieces: list[bytes]) -> None:
        self._hash.update(b"".join(pieces))

    def hexdigest(self) -> str:
        """The digest of every piece so far (waits for the worker to catch up)."""
        if self._pieces:
            self._hand_over()
        while self._pending:
            self._pending.popleft().result()
        return self._hash.hexdigest()
