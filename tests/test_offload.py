"""Work on large bodies beside the event loop keeps their order, surfaces its errors, and never
lets more than a bounded amount wait."""

from __future__ import annotations

import hashlib
import threading

import pytest

from undoproxy.offload import (
    BATCH,
    DIGEST_BATCH,
    DIGEST_PENDING,
    HASHING,
    MAX_PENDING,
    OFFLOAD_OVER,
    STORING,
    InOrder,
    StreamDigest,
)


@pytest.mark.parametrize(
    "sizes",
    [
        [10, 20, 30],  # small pieces: inline, in order
        [10, OFFLOAD_OVER, 5, BATCH, 7, 3 * BATCH + 1, 1],  # small, then large: still in order
        [64 * 1024] * 200,  # a download's reads
    ],
)
def test_the_digest_is_the_digest_of_the_pieces_in_order(sizes: list[int]) -> None:
    pieces = [bytes([i % 251]) * size for i, size in enumerate(sizes)]
    digest = StreamDigest()
    for piece in pieces:
        digest.update(piece)
    assert digest.hexdigest() == hashlib.sha256(b"".join(pieces)).hexdigest()
    digest.update(b"more")  # it goes on after a look
    assert digest.hexdigest() == hashlib.sha256(b"".join([*pieces, b"more"])).hexdigest()


def test_the_digest_keeps_what_a_reused_buffer_held_when_it_was_given() -> None:
    """A piece handed over in a buffer its owner fills again at once (a bytearray) is hashed
    as it was when given, not as it is when the worker gets to it."""
    buffer = bytearray(64 * 1024)
    given = []
    digest = StreamDigest()
    for i in range(40):
        buffer[:] = bytes([i]) * len(buffer)
        given.append(bytes(buffer))
        digest.update(buffer)  # type: ignore[arg-type]
    buffer[:] = b"\xff" * len(buffer)
    assert digest.hexdigest() == hashlib.sha256(b"".join(given)).hexdigest()


def test_two_works_on_two_workers_each_see_every_piece_in_order() -> None:
    hashed = hashlib.sha256()
    stored = bytearray()
    queue = InOrder(hashed.update, (stored.extend, STORING), batch=3 * BATCH)
    pieces = [bytes([i % 251]) * size for i, size in enumerate([10, BATCH, 7, 5 * BATCH, 1] * 20)]
    for piece in pieces:
        queue.add(piece)
    queue.done()
    assert hashed.hexdigest() == hashlib.sha256(b"".join(pieces)).hexdigest()
    assert bytes(stored) == b"".join(pieces)


def test_an_error_of_the_work_reaches_the_caller() -> None:
    def refuse(piece: bytes) -> None:
        raise OSError(28, "No space left on device")

    queue = InOrder(refuse)
    with pytest.raises(OSError, match="No space left"):
        for _ in range(MAX_PENDING + 2):
            queue.add(b"x" * BATCH)
        queue.done()


def test_no_more_than_max_pending_batches_wait() -> None:
    gate = threading.Event()
    started = threading.Semaphore(0)
    seen: list[int] = []

    def slow(piece: bytes) -> None:
        started.release()
        gate.wait(10)
        seen.append(len(piece))

    queue = InOrder(slow)
    adder = threading.Thread(
        target=lambda: [queue.add(b"x" * BATCH) for _ in range(MAX_PENDING + 5)]
    )
    adder.start()
    assert started.acquire(timeout=10)
    adder.join(0.3)
    assert adder.is_alive()  # it waits for the worker: memory stays bounded
    gate.set()
    adder.join(10)
    queue.done()
    assert seen == [BATCH] * (MAX_PENDING + 5)


def test_a_digest_holds_no_more_than_its_pending_batches() -> None:
    """While the hashing thread is busy, a StreamDigest keeps at most DIGEST_PENDING batches
    of pieces (then the caller waits): exactly that many go through, the next one waits."""
    gate = threading.Event()
    HASHING.submit(gate.wait, 10)  # the hashing thread, busy
    digest = StreamDigest()
    batch = b"x" * DIGEST_BATCH
    given: list[int] = []

    def add(n: int) -> None:
        for _ in range(n):
            digest.update(batch)
            given.append(1)

    adder = threading.Thread(target=add, args=(DIGEST_PENDING + 3,))
    adder.start()
    adder.join(0.5)
    assert adder.is_alive()  # it waits for the hashing thread: memory stays bounded
    assert len(given) == DIGEST_PENDING  # the one past the bound has not been taken
    gate.set()
    adder.join(10)
    assert digest.hexdigest() == hashlib.sha256(batch * (DIGEST_PENDING + 3)).hexdigest()
