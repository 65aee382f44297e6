"""The SQLite journal's writer: group commit on the event loop, the commits in a process of
their own (`sqlite_child`, which says why).

`JournalWriter` is a `QueuedWriter`: the queue, withdrawal and timeouts are the same as for
every store. Each batch it takes is sent to the child over a pipe and its outcome read back;
the loop does not wait for anything else meanwhile (the next batch gathers). The child is
started with the writer and, should it die, started again for the next batch: the batch it
was committing is reported failed (its callers get JournalError, so a write-ahead's request is
not forwarded), since nobody can say whether that commit reached the disk.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import pickle
import sys
from pathlib import Path
from typing import Any

from undoproxy.credentials import CredentialBox
from undoproxy.store.chain import ChainKey
from undoproxy.store.sqlite_child import HEADER, frame
from undoproxy.store.writer import QueuedWriter, _Op

log = logging.getLogger(__name__)
# How the child is started (bench/nochain.py starts its own, without the hash chain).
CHILD: tuple[str, ...] = (sys.executable, "-m", "undoproxy.store.sqlite_child")
START_TIMEOUT = 30.0  # seconds for the child to open the journal


class ChildFailed(Exception):
    """The writer process could not be started or ended while it held a batch."""


class JournalWriter(QueuedWriter):
    """Commits batches through the writer process; start() it in the running loop, close()
    drains, then ends the process."""

    # No lingering: a commit costs the event loop only a pipe write and a read, and at one
    # client a write-ahead that carried the previous request's outcome waited for it
    # (bench/README.md: 0.66x -> 0.8x of bare mitmdump's POSTs at one client).
    linger = 0.0

    def __init__(
        self,
        path: Path,
        *,
        busy_timeout_ms: int = 2000,
        timeout: float = 5.0,
        chain_key: ChainKey | None = None,
    ) -> None:
        super().__init__(timeout=timeout)
        self._path = path
        # What the chain's entries are keyed with: the installation's (Journal.open passes
        # it), else this process's own key, as a Journal without a box uses.
        self._chain_key = chain_key or ChainKey.of(CredentialBox.for_this_process())
        self._busy_timeout_ms = busy_timeout_ms
        self._child: asyncio.subprocess.Process | None = None
        self.pid: int | None = None  # the writer process's, once it is up

    async def _commit(self, batch: list[_Op]) -> None:
        try:
            message = frame([(op.sql, op.params, op.done is not None) for op in batch])
        except (pickle.PicklingError, TypeError, AttributeError) as exc:
            for op in batch:
                op.error = exc
            return
        try:
            child = await self._sent(message)
            assert child.stdout is not None
            outcomes = await _read(child.stdout)
        except (ChildFailed, OSError, EOFError, asyncio.IncompleteReadError) as exc:
            why = exc if isinstance(exc, ChildFailed) else await self._ended(exc)
            for op in batch:
                op.error = why
            return
        for op, outcome in zip(batch, outcomes, strict=True):
            if outcome is not None:
                op.error = ChildFailed(outcome)

    async def _sent(self, message: bytes) -> asyncio.subprocess.Process:
        """The child the batch went to. A child that died since the last batch cannot take it
        (the pipe is broken): it never saw the batch, so the batch goes to a new one."""
        for attempt in (1, 2):
            child = await self._started()
            assert child.stdin is not None
            try:
                child.stdin.write(message)
                await child.stdin.drain()
            except OSError as exc:
                if attempt == 2:
                    raise ChildFailed(f"cannot reach the journal's writer process: {exc}") from exc
                await self._ended(exc, holding=False)
                continue
            return child
        raise AssertionError("unreachable")

    async def _started(self) -> asyncio.subprocess.Process:
        """The running child, started (and its journal opened) if there is none."""
        if self._child is not None:
            if self._child.returncode is None:
                return self._child
            log.error(
                "the journal's writer process ended (exit code %s) between commits; "
                "starting another",
                self._child.returncode,
            )
            self._child = None
        child = await asyncio.create_subprocess_exec(
            *CHILD,
            str(self._path),
            str(self._busy_timeout_ms),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            start_new_session=True,  # Ctrl-C reaches undoproxy, which then closes the child
        )
        assert child.stdout is not None and child.stdin is not None
        try:
            child.stdin.write(frame(("key", self._chain_key.secret)))
            await child.stdin.drain()
            said = await asyncio.wait_for(_read(child.stdout), START_TIMEOUT)
        except (OSError, EOFError, asyncio.IncompleteReadError, TimeoutError):
            said = ("failed", "the journal's writer process did not start")
        if not (isinstance(said, tuple) and said[0] == "ready"):
            with contextlib.suppress(ProcessLookupError):
                child.kill()
            await child.wait()
            raise ChildFailed(said[1] if isinstance(said, tuple) else "the writer did not start")
        self._child, self.pid = child, said[1]
        return child

    async def _ended(self, exc: BaseException, *, holding: bool = True) -> ChildFailed:
        """The child died (holding a batch, or idle): say so; the next batch starts another."""
        child, self._child = self._child, None
        code = await child.wait() if child is not None else None
        during = "during a commit" if holding else "between commits"
        log.error("the journal's writer process ended (exit code %s) %s", code, during)
        return ChildFailed(
            f"the journal's writer process ended during the commit (exit code {code}; "
            f"{type(exc).__name__}); whether it was committed is not known"
        )

    async def _close(self) -> None:
        child, self._child = self._child, None
        if child is None or child.returncode is not None:
            return
        assert child.stdin is not None
        child.stdin.close()  # end of input: the child closes the journal and exits
        try:
            await asyncio.wait_for(child.wait(), 30)
        except TimeoutError:
            log.error("the journal's writer process did not exit; killing it")
            child.kill()
            await child.wait()


async def _read(stream: asyncio.StreamReader) -> Any:
    (size,) = HEADER.unpack(await stream.readexactly(HEADER.size))
    return pickle.loads(await stream.readexactly(size))
