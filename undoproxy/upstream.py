"""Requests undoproxy itself sends upstream: snapshots before mutations and compensations.

They go straight to the upstream with aiohttp, never through mitmproxy (whose replay would
run them one at a time and through our own hooks).

Bodies are read as the upstream stores them: undoproxy asks for `Accept-Encoding: identity`
and never decodes a content coding (a gzip-encoded object is snapshotted, restored and compared
as its gzip bytes with its `Content-Encoding`, never turned into a third state; a compressed
"bomb" costs only its own size). A body is kept up to a limit (`keep`) and hashed whole as it
streams: what is larger is known by its length and SHA-256 (enough to tell whether a target
changed), or the read gives up at the limit when the caller needs every byte (`need_all`),
or, given `spill`, the whole body goes to an encrypted body file (a snapshot too large for the
journal: undoproxy/bodyfiles.py) and the response names it (`file`). A body to send may be
such a file too (`FileBody`): it is streamed from disk, a record at a time.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field

import aiohttp
from yarl import URL

from undoproxy import redact
from undoproxy.bodyfiles import BodyFileError, BodyFiles, BodyWriter, FileBody
from undoproxy.broker import Broker
from undoproxy.retry import RETRY_STATUSES, RetryPolicy
from undoproxy.signing import Signers

log = logging.getLogger(__name__)

# What a read of ours may carry besides the agent's credentials: how the agent asks for a
# representation, never what is specific to its one request (signatures, dates, content
# hashes, conditional headers, idempotency keys).
_READ_HEADERS = frozenset({"accept", "accept-language", "user-agent"})


# What undoproxy keeps of a body it reads, unless the caller says otherwise; the rest is hashed.
KEEP = 16 * 1024 * 1024
_CHUNK = 64 * 1024


def snapshot_headers(headers: list[tuple[str, str]]) -> dict[str, str]:
    """The agent's headers that describe how it reads (credentials are added separately)."""
    return {k: v for k, v in headers if k.lower() in _READ_HEADERS}


@dataclass
class UpstreamResponse:
    """A response from an upstream: its body as served (never decoded), kept up to a limit.

    `length` and `sha256` always describe the whole body; `complete` is False when only its
    first bytes were kept (`body`)."""

    status: int
    headers: dict[str, str]
    body: bytes
    attempts: int = 1
    length: int = -1
    sha256: str = ""
    file: FileBody | None = None  # the whole body, when it went to a body file (`spill`)

    def __post_init__(self) -> None:
        if self.length < 0:
            self.length = len(self.body)
        if not self.sha256 and self.length == len(self.body):
            self.sha256 = hashlib.sha256(self.body).hexdigest()

    @property
    def complete(self) -> bool:
        """True when `body` holds the whole body."""
        return self.length == len(self.body)

    def header(self, name: str) -> str | None:
        """A header by case-insensitive name."""
        lower = name.lower()
        return next((v for k, v in self.headers.items() if k.lower() == lower), None)


class BodyTooLarge(Exception):
    """A body the caller needs whole is larger than it allowed."""


@dataclass(frozen=True)
class Spill:
    """Where a body larger than `keep` goes instead of memory: a new body file of the
    session, of at most `limit` bytes (past it: BodyTooLarge)."""

    files: BodyFiles
    session_id: str
    limit: int


@dataclass
class UpstreamError(Exception):
    """The upstream could not be reached (after retries, where retrying was safe)."""

    message: str
    attempts: int = 1
    history: list[str] = field(default_factory=list)

    def __str__(self) -> str:
        return self.message


class UpstreamClient:
    """One aiohttp session for all of undoproxy's own upstream requests.

    A request to a host that `signers` has a key for is signed at send time, each attempt
    afresh (undoproxy's key replaces the agent's signature; see `undoproxy/signing.py`). With
    a `broker`, the secrets of the request's session for its host are put in first (replacing
    the agent's placeholders; see `undoproxy/broker/`), and its `signers` sign. Redirects are
    never followed: a secret goes only to the host it was put in for.
    """

    def __init__(
        self,
        *,
        insecure: bool = False,
        timeout: float = 30.0,
        signers: Signers | None = None,
        broker: Broker | None = None,
        files: BodyFiles | None = None,
    ) -> None:
        self._insecure = insecure
        self.broker = broker
        self.signers = broker.signers if broker is not None else signers or Signers()
        self.files = files  # where FileBody bodies are read from
        self._timeout = aiohttp.ClientTimeout(total=timeout)
        self._session: aiohttp.ClientSession | None = None

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            connector = aiohttp.TCPConnector(ssl=not self._insecure, limit=64)
            self._session = aiohttp.ClientSession(
                connector=connector,
                timeout=self._timeout,
                trust_env=False,
                auto_decompress=False,  # bodies as stored: see the module docstring
                # One client serves every session: a cookie an upstream set in answer to one
                # session's snapshot or compensation must never ride along with another's.
                cookie_jar=aiohttp.DummyCookieJar(),
            )
        return self._session

    async def close(self) -> None:
        """Close the pooled connections."""
        if self._session is not None:
            await self._session.close()

    async def send(
        self,
        method: str,
        url: str,
        headers: Mapping[str, str] | None = None,
        body: bytes | FileBody | None = None,
        *,
        keep: int = KEEP,
        need_all: bool = False,
        session: str | None = None,
        spill: Spill | None = None,
    ) -> UpstreamResponse:
        """One attempt; raises UpstreamError when no response arrives (or a FileBody cannot
        be read), BodyTooLarge when `need_all` and the body is larger than `keep` bytes (read
        no further) or, with `spill`, larger than its limit. `session`: the session it is
        sent for (its secrets, its signing keys)."""
        target: str | URL = url
        sent_headers = dict(headers or {})
        if not any(k.lower() == "accept-encoding" for k in sent_headers):
            sent_headers["Accept-Encoding"] = "identity"
        data: bytes | AsyncIterator[bytes] | None
        inline: bytes | None = None
        payload: str | None = None  # the hash a signature covers, when the body is a file
        if isinstance(body, FileBody):
            data = self._file_data(body, url)
            sent_headers = {k: v for k, v in sent_headers.items() if k.lower() != "content-length"}
            sent_headers["Content-Length"] = str(body.length)
            payload = body.sha256
        else:
            data = inline = body
        if self.broker is not None:
            signed = self.signers.for_url(url, session) is not None
            url, sent_headers = self.broker.outgoing(
                method, url, sent_headers, inline, session, payload_sha256=payload
            )
            if signed:
                target = URL(url, encoded=True)  # sent exactly as signed, never re-quoted
        elif self.signers.for_url(url, session) is not None:
            url, sent_headers = self.signers.sign(
                method, url, sent_headers, inline, session=session, payload_sha256=payload
            )
            target = URL(url, encoded=True)  # sent exactly as signed, never re-quoted
        try:
            async with self._client().request(
                method, target, headers=sent_headers, data=data, allow_redirects=False
            ) as resp:
                return await _read(resp, keep, need_all, spill)
        except BodyFileError as exc:
            raise UpstreamError(f"{method} {redact.url(url)} was not sent: {exc}") from None
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            raise UpstreamError(
                f"{method} {redact.url(url)}: {type(exc).__name__}: {self._said(exc)}"
            ) from None
        except ValueError as exc:  # a header value with CR/LF, a URL aiohttp cannot send
            raise UpstreamError(
                f"{method} {redact.url(url)} cannot be sent: {type(exc).__name__}: "
                f"{self._said(exc)}"
            ) from None

    def _said(self, exc: Exception) -> str:
        """An exception's message as an error may show it: secrets hidden, by name and by value."""
        text = redact.text(str(exc))
        return self.broker.scrub(text) if self.broker is not None else text

    def _file_data(self, body: FileBody, url: str) -> AsyncIterator[bytes]:
        """The body file's bytes, a record at a time, read and opened off the event loop."""
        if self.files is None or not self.files.exists(body):
            raise UpstreamError(
                f"the body to send to {redact.url(url)} was kept in the body file "
                f"{body.name}, which is not in this installation's state dir (a replica that "
                "does not share it?): nothing was sent"
            )
        pieces = self.files.chunks(body)

        async def stream() -> AsyncIterator[bytes]:
            while piece := await asyncio.to_thread(next, pieces, b""):
                yield piece

        return stream()

    async def send_with_retries(
        self,
        method: str,
        url: str,
        policy: RetryPolicy,
        headers: Mapping[str, str] | None = None,
        body: bytes | FileBody | None = None,
        *,
        keep: int = KEEP,
        need_all: bool = False,
        session: str | None = None,
        spill: Spill | None = None,
    ) -> UpstreamResponse:
        """Retry connection errors, 5xx and 429 with backoff; the last answer or UpstreamError.

        Only call this for requests that are safe to repeat (GETs, and compensations that are
        idempotent by construction: PUT of a snapshot, DELETE; never POST or PATCH).
        """
        history: list[str] = []
        for attempt in range(1, policy.attempts + 1):
            retry_after = None
            try:
                response = await self.send(
                    method,
                    url,
                    headers,
                    body,
                    keep=keep,
                    need_all=need_all,
                    session=session,
                    spill=spill,
                )
            except UpstreamError as exc:
                history.append(str(exc))
                if attempt == policy.attempts:
                    raise UpstreamError(
                        f"{exc} (after {attempt} attempts)", attempt, history
                    ) from None
            else:
                response.attempts = attempt
                if response.status not in RETRY_STATUSES or attempt == policy.attempts:
                    return response
                history.append(f"HTTP {response.status}")
                retry_after = response.header("Retry-After")
            await asyncio.sleep(policy.delay(attempt, retry_after))
        raise AssertionError("unreachable")


async def _read(
    resp: aiohttp.ClientResponse, keep: int, need_all: bool, spill: Spill | None = None
) -> UpstreamResponse:
    """The response with its first `keep` bytes kept and the whole body hashed as it streams
    (with `spill`: the whole body in a body file once it is larger than `keep`)."""
    digest = hashlib.sha256()
    kept = bytearray()
    length = 0
    announced = resp.content_length
    limit = spill.limit if spill is not None else keep
    if need_all and announced is not None and announced > limit:
        raise BodyTooLarge(f"the body is {announced} bytes, over the limit of {limit}")
    filed: tuple[str, BodyWriter] | None = None
    try:
        async for chunk in resp.content.iter_chunked(_CHUNK):
            length += len(chunk)
            if need_all and length > limit:
                raise BodyTooLarge(f"the body is over the limit of {limit} bytes")
            digest.update(chunk)
            if filed is not None:
                filed[1].write(chunk)
            elif len(kept) + len(chunk) <= keep:
                kept += chunk
            elif spill is not None:
                filed = spill.files.create(spill.session_id)
                filed[1].write(bytes(kept) + chunk)
                kept.clear()
            else:
                kept += chunk[: keep - len(kept)]
        if filed is None:
            return UpstreamResponse(
                resp.status, dict(resp.headers), bytes(kept), length=length,
                sha256=digest.hexdigest(),
            )  # fmt: skip
        name, writer = filed
        copy = writer.finish()
        writer.file.close()
        return UpstreamResponse(
            resp.status,
            dict(resp.headers),
            b"",
            length=length,
            sha256=copy.sha256,
            file=FileBody(name, copy.length, copy.sha256),
        )
    except BaseException:
        if filed is not None and spill is not None:
            filed[1].file.close()
            spill.files.discard(filed[0])
        raise
