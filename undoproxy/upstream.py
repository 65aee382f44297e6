"""Requests undoproxy itself sends upstream: snapshots before mutations and compensations.

They go straight to the upstream with aiohttp, never through mitmproxy (whose replay would
run them one at a time and through our own hooks).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field

import aiohttp
from yarl import URL

from undoproxy import redact
from undoproxy.limits import MAX_UPSTREAM_ANSWER
from undoproxy.retry import RETRY_STATUSES, RetryPolicy
from undoproxy.signing import Signers

log = logging.getLogger(__name__)

# What a read of ours may carry besides the agent's credentials: how the agent asks for a
# representation, never what is specific to its one request (signatures, dates, content
# hashes, conditional headers, idempotency keys).
_READ_HEADERS = frozenset({"accept", "accept-language", "user-agent"})


def snapshot_headers(headers: list[tuple[str, str]]) -> dict[str, str]:
    """The agent's headers that describe how it reads (credentials are added separately)."""
    return {k: v for k, v in headers if k.lower() in _READ_HEADERS}


@dataclass
class UpstreamResponse:
    """A complete response from an upstream."""

    status: int
    headers: dict[str, str]
    body: bytes
    attempts: int = 1

    def header(self, name: str) -> str | None:
        """A header by case-insensitive name."""
        lower = name.lower()
        return next((v for k, v in self.headers.items() if k.lower() == lower), None)


@dataclass
class UpstreamError(Exception):
    """The upstream could not be reached (after retries, where retrying was safe)."""

    message: str
    attempts: int = 1
    history: list[str] = field(default_factory=list)

    def __str__(self) -> str:
        return self.message


async def _read_at_most(resp: aiohttp.ClientResponse, limit: int) -> bytes:
    """The body, as aiohttp decodes it; UpstreamError past `limit` bytes (a decompression
    bomb, or a target too large to keep): never more than that is held in memory."""
    body = bytearray()
    while chunk := await resp.content.read(64 * 1024):
        body += chunk
        if len(body) > limit:
            raise UpstreamError(
                f"{resp.method} {redact.url(str(resp.url))}: the answer is larger than "
                f"{limit} bytes; undoproxy reads no more of it"
            )
    return bytes(body)


class UpstreamClient:
    """One aiohttp session for all of undoproxy's own upstream requests.

    A request to a host that `signers` has a key for is signed at send time, each attempt
    afresh (undoproxy's key replaces the agent's signature; see `undoproxy/signing.py`).
    """

    def __init__(
        self, *, insecure: bool = False, timeout: float = 30.0, signers: Signers | None = None
    ) -> None:
        self._insecure = insecure
        self.signers = signers or Signers()
        self._timeout = aiohttp.ClientTimeout(total=timeout)
        self._session: aiohttp.ClientSession | None = None

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            connector = aiohttp.TCPConnector(ssl=not self._insecure, limit=64)
            self._session = aiohttp.ClientSession(
                connector=connector,
                timeout=self._timeout,
                trust_env=False,
                auto_decompress=True,
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
        body: bytes | None = None,
    ) -> UpstreamResponse:
        """One attempt; raises UpstreamError when no response arrives."""
        target: str | URL = url
        sent_headers = dict(headers or {})
        if self.signers.for_url(url) is not None:
            url, sent_headers = self.signers.sign(method, url, sent_headers, body)
            target = URL(url, encoded=True)  # sent exactly as signed, never re-quoted
        try:
            async with self._client().request(
                method, target, headers=sent_headers, data=body, allow_redirects=False
            ) as resp:
                data = await _read_at_most(resp, MAX_UPSTREAM_ANSWER)
                return UpstreamResponse(resp.status, dict(resp.headers), data)
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            raise UpstreamError(
                f"{method} {redact.url(url)}: {type(exc).__name__}: {redact.text(str(exc))}"
            ) from None
        except ValueError as exc:  # a header value with CR/LF, a URL aiohttp cannot send
            raise UpstreamError(
                f"{method} {redact.url(url)} cannot be sent: {type(exc).__name__}: "
                f"{redact.text(str(exc))}"
            ) from None

    async def send_with_retries(
        self,
        method: str,
        url: str,
        policy: RetryPolicy,
        headers: Mapping[str, str] | None = None,
        body: bytes | None = None,
    ) -> UpstreamResponse:
        """Retry connection errors, 5xx and 429 with backoff; the last answer or UpstreamError.

        Only call this for requests that are safe to repeat (GETs, and compensations that are
        idempotent by construction: PUT of a snapshot, DELETE).
        """
        history: list[str] = []
        for attempt in range(1, policy.attempts + 1):
            retry_after = None
            try:
                response = await self.send(method, url, headers, body)
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
