"""Bodies kept on disk, encrypted: request bodies too large to hold while they are judged, and
snapshots too large to keep in the journal.

Memory per transfer stays bounded whatever its size: a body is written to a file as it
arrives, in records of at most `RECORD` bytes, and read back the same way. What the journal
keeps of it is a `BodyCopy`: its first bytes, its length and its SHA-256.

Every record is sealed with AES-GCM (nonce: the file's random 8-byte prefix and the record's
number; the last record, empty, is marked in its associated data), so a file that was edited, cut
short or reordered is refused when it is read, never replayed in part:

    MAGIC | nonce prefix (8) | { length (4, big-endian) | ciphertext + tag } ...

Two kinds of key: a request body being judged is spooled under a key that exists only in
this process's memory (the file is also unlinked at once: nothing of it outlives the
transfer, or a crash); a large snapshot, which rollback may need days later, under a key
derived from the credentials key (`CredentialBox.file_key`), like the bodies the journal
seals (undoproxy/store/bodies.py).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import secrets
import shutil
import struct
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from undoproxy.offload import STORING, InOrder

MAGIC = b"UPXBODY1"
RECORD = 1024 * 1024  # plaintext bytes per sealed record, at most: what is in memory at once
_READ = 64 * 1024  # what one read brings, about: a batch of RECORD - _READ or more fills a record
_PREFIX = 8
_LENGTH = struct.Struct(">I")
_LAST, _MORE = b"last", b"more"


class BodyFileError(ValueError):
    """A body file that cannot be read back as written (edited, truncated, another key)."""


@dataclass(frozen=True)
class BodyCopy:
    """What undoproxy keeps of a body it did not hold whole: its first bytes (up to the
    limit its caller chose), its length and the SHA-256 of all of it."""

    head: bytes
    length: int
    sha256: str

    @property
    def complete(self) -> bool:
        """True when `head` is the whole body."""
        return len(self.head) == self.length


def new_key() -> bytes:
    """A key for one process's spool files (AES-128)."""
    return AESGCM.generate_key(128)


@dataclass
class BodyWriter:
    """Writes one body to `file`, sealed, as it arrives; keeps its first `keep` bytes.

    `write` as chunks come, `finish` once (it returns the BodyCopy and leaves the file ready
    to be read from the start with `chunks`).
    """

    file: BinaryIO
    key: bytes
    keep: int = 0
    length: int = 0
    head: bytearray = field(default_factory=bytearray)
    _digest: hashlib._Hash = field(default_factory=hashlib.sha256)
    _prefix: bytes = field(default_factory=lambda: secrets.token_bytes(_PREFIX))
    _records: int = 0
    _copy: BodyCopy | None = None

    def __post_init__(self) -> None:
        self._aead = AESGCM(self.key)
        self.file.write(MAGIC + self._prefix)
        # Hashing, and sealing with writing, happen beside the event loop, in order, each on
        # a thread of its own (offload.py); a batch of about a record is sealed as it came.
        self._queue = InOrder(self._digest.update, (self._store, STORING), batch=RECORD - _READ)

    def write(self, data: bytes) -> None:
        """Add `data` to the body (raises OSError when the disk refused earlier data)."""
        if self._copy is not None:
            raise ValueError("this body is finished")
        if not data:
            return
        self.length += len(data)
        if len(self.head) < self.keep:
            self.head += data[: self.keep - len(self.head)]
        self._queue.add(data)

    def _store(self, data: bytes | bytearray) -> None:
        """Seal `data` as records of at most RECORD bytes (a record may be shorter: what
        arrived is not copied again to fill one)."""
        view = memoryview(data)
        while view:
            self._seal(view[:RECORD], last=False)
            view = view[RECORD:]

    def finish(self) -> BodyCopy:
        """Seal what is left as the last record; the copy of the whole body (raises OSError
        when the disk refused any of it)."""
        if self._copy is None:
            self._queue.done()
            self._seal(b"", last=True)
            self.file.flush()
            self._copy = BodyCopy(bytes(self.head), self.length, self._digest.hexdigest())
        return self._copy

    def _seal(self, plain: bytes | memoryview, *, last: bool) -> None:
        nonce = self._prefix + self._records.to_bytes(4, "big")
        # Any bytes-like object is accepted (a bytearray spares a copy); the stubs say bytes.
        sealed = self._aead.encrypt(nonce, plain, _LAST if last else _MORE)  # type: ignore[arg-type]
        self.file.write(_LENGTH.pack(len(sealed)))
        self.file.write(sealed)
        self._records += 1


def chunks(file: BinaryIO, key: bytes) -> Iterator[bytes]:
    """The body a BodyWriter wrote to `file`, from its start, one record at a time; raises
    BodyFileError when the file is not intact (or was written under another key)."""
    file.seek(0)
    start = file.read(len(MAGIC) + _PREFIX)
    if len(start) != len(MAGIC) + _PREFIX or not start.startswith(MAGIC):
        raise BodyFileError("not a body file")
    prefix = start[len(MAGIC) :]
    aead = AESGCM(key)
    number = 0
    while True:
        size = file.read(_LENGTH.size)
        if len(size) != _LENGTH.size:
            raise BodyFileError("the body file ends before its last record")
        (length,) = _LENGTH.unpack(size)
        if length > RECORD + 16:
            raise BodyFileError("a record of the body file is larger than any written")
        sealed = file.read(length)
        if len(sealed) != length:
            raise BodyFileError("the body file ends inside a record")
        nonce = prefix + number.to_bytes(4, "big")
        try:
            plain = aead.decrypt(nonce, sealed, _MORE)
            last = False
        except InvalidTag:
            try:
                plain = aead.decrypt(nonce, sealed, _LAST)
            except InvalidTag:
                raise BodyFileError(
                    "a record of the body file does not open (edited, reordered, or sealed "
                    "under another key)"
                ) from None
            last = True
        number += 1
        if plain:
            yield plain
        if last:
            if file.read(1):
                raise BodyFileError("the body file has data after its last record")
            return


class Spool:
    """A request body on its way through: an unlinked temporary file under a key of this
    process's own, gone when closed (or when the process ends, however it ends)."""

    def __init__(self, directory: Path, keep: int) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self._file = tempfile.TemporaryFile(dir=directory)  # noqa: SIM115 - closed in close()
        self._key = new_key()
        self.writer = BodyWriter(self._file, self._key, keep)
        self.copy: BodyCopy | None = None

    def write(self, data: bytes) -> None:
        """Add what arrived."""
        self.writer.write(data)

    @property
    def length(self) -> int:
        """Bytes written so far."""
        return self.writer.length

    def finish(self) -> BodyCopy:
        """The whole body has arrived."""
        self.copy = self.writer.finish()
        return self.copy

    def chunks(self) -> Iterator[bytes]:
        """The body again, from the start, in bounded pieces."""
        return chunks(self._file, self._key)

    def close(self) -> None:
        """Forget the body (the file is freed by the OS)."""
        self._file.close()


def private_dir(path: Path) -> Path:
    """`path`, created if need be, readable by this user only."""
    path.mkdir(parents=True, exist_ok=True)
    os.chmod(path, 0o700)
    return path


@dataclass(frozen=True)
class FileBody:
    """A body kept in a body file (`BodyFiles`), by name, with its length and SHA-256: how a
    snapshot too large for the journal, and the compensation that writes it back, refer to it.
    """

    name: str
    length: int
    sha256: str

    def to_json(self) -> dict[str, object]:
        """The journal's form."""
        return {"name": self.name, "length": self.length, "sha256": self.sha256}

    @classmethod
    def from_json(cls, data: object) -> FileBody | None:
        """Back from the journal's form (None when `data` is not one)."""
        if not isinstance(data, dict):
            return None
        name, length, sha = data.get("name"), data.get("length"), data.get("sha256")
        if not isinstance(name, str) or not isinstance(length, int) or not isinstance(sha, str):
            return None
        return cls(name, length, sha)


class BodyFiles:
    """The body files of one installation: `<state_dir>/bodies/<session>/<id>.body`, sealed
    under a key derived from the credentials key (`CredentialBox.file_key`), so that they
    outlive restarts and open only with that key. A session's files go when it is committed
    or rolled back (`forget`); replicas that share the state dir share them."""

    def __init__(self, directory: Path, key: bytes) -> None:
        self.directory = directory
        self.key = key

    def _session_dir(self, session_id: str) -> Path:
        digest = hashlib.sha256(session_id.encode()).hexdigest()[:32]
        return self.directory / digest

    def create(self, session_id: str, keep: int = 0) -> tuple[str, BodyWriter]:
        """A new body file of the session: its name and the writer to fill it (the caller
        finishes it, then closes `writer.file`; `discard(name)` if it is not kept)."""
        where = private_dir(self._session_dir(session_id))
        owner = where / "session"
        if not owner.exists():
            owner.write_text(session_id)
        name = f"{where.name}/{secrets.token_hex(12)}.body"
        fd = os.open(self.directory / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        return name, BodyWriter(os.fdopen(fd, "w+b"), self.key, keep)

    def path(self, name: str) -> Path:
        """Where a body file is (ValueError for a name that is not one of ours)."""
        parts = Path(name).parts
        if len(parts) != 2 or not parts[1].endswith(".body") or ".." in parts:
            raise ValueError(f"not a body file name: {name!r}")
        return self.directory / name

    def exists(self, ref: FileBody) -> bool:
        """True when the file is here (another replica's state dir may not hold it)."""
        try:
            return self.path(ref.name).is_file()
        except ValueError:
            return False

    def chunks(self, ref: FileBody) -> Iterator[bytes]:
        """The body, one record at a time; BodyFileError when it is missing or not intact."""
        try:
            file = self.path(ref.name).open("rb")
        except (OSError, ValueError) as exc:
            raise BodyFileError(f"the body file {ref.name} cannot be opened: {exc}") from None
        with file:
            yield from chunks(file, self.key)

    def discard(self, name: str) -> None:
        """Remove one body file (one that will not be used)."""
        with contextlib.suppress(OSError, ValueError):
            self.path(name).unlink(missing_ok=True)

    def forget(self, session_id: str) -> None:
        """Remove every body file of a session (committed or rolled back: nothing will
        replay them)."""
        shutil.rmtree(self._session_dir(session_id), ignore_errors=True)

    def sessions(self) -> dict[str, Path]:
        """session id -> its directory, for every session that has body files."""
        out: dict[str, Path] = {}
        if not self.directory.is_dir():
            return out
        for child in self.directory.iterdir():
            owner = child / "session"
            try:
                out[owner.read_text()] = child
            except OSError:
                continue
        return out
