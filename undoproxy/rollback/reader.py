"""Rollback's reads: a target read as the agent would read it, and the pages of a listing.

Every verdict rests on a read made here (`compare.Read`): with the agent's credentials (only
to the step's own origin), never of a pinned version of the resource (`?rev=` dropped), its
body kept as the upstream stores it. A read-back of a listing that pages (Slack's cursors, an
RFC 8288 `Link: <…>; rel="next"`) is read page by page, up to MAX_PAGES: a check on "every
member" that read only the first page would pass for a channel of 1,001.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, urlencode, urljoin, urlsplit, urlunsplit

from undoproxy import redact
from undoproxy.compensators import readback
from undoproxy.compensators.model import Snapshot, origin, parse_json
from undoproxy.credentials import CredentialBox
from undoproxy.retry import RetryPolicy
from undoproxy.rollback.compare import PRESENT, Read
from undoproxy.rollback.outgoing import check_headers, read_request, resource_url
from undoproxy.store.records import Step
from undoproxy.upstream import UpstreamClient, UpstreamError

MAX_PAGES = 100  # a read-back of a listing follows at most this many pages


@dataclass
class Pages:
    """Every page of a listing: the first read (its state decides) and the JSON of each."""

    first: Read
    docs: list[Any]
    complete: bool  # False when MAX_PAGES were read and more remained


class Reader:
    """Reads targets with a step's credentials."""

    def __init__(self, client: UpstreamClient, box: CredentialBox, policy: RetryPolicy) -> None:
        self.client = client
        self.box = box
        self.policy = policy

    async def read(
        self,
        step: Step,
        url: str,
        snap: Snapshot | None,
        *,
        method: str = "GET",
        extra: dict[str, str] | None = None,
        body: bytes | None = None,
        absent_when: dict[str, Any] | None = None,
    ) -> Read:
        """GET the resource (never a pinned version of it) with the agent's credentials; or
        another read (`method`: a PROPFIND, an RPC read by POST, with its `extra` headers and
        `body`; `absent_when`: the API's own answer for "no such thing", see
        compensators/readback.py). A read changes nothing, so it is retried like a GET."""
        target = resource_url(url)
        accept = snap.content_type if snap is not None else None
        request = read_request(
            target, step.url, self.box.open(step.credentials), accept, session=step.session_id
        )
        check_headers(extra or {})
        try:
            resp = await self.client.send_with_retries(
                method,
                request.url,
                self.policy,
                {**request.headers, **(extra or {})},
                body,
                session=request.session,
            )
        except UpstreamError as exc:
            return Read(target, None, str(exc).replace(target, redact.url(target)), method)
        gone = readback.absent_answer(absent_when, resp.status, resp.body)
        return Read(target, resp, method=method, absent_answer=gone)

    async def spec(self, step: Step, spec: dict[str, Any]) -> Pages:
        """What a pack's read-back reads: its URL's pages (a GET), or the one RPC read it
        names (`method`, `headers`, `body_b64`, `absent_when`: compensators/readback.py)."""
        url = str(spec.get("url") or "")
        method, headers, body = readback.request_of(spec)
        if method == "GET" and not spec.get("absent_when"):
            return await self.pages(step, url, spec.get("pages"))
        read = await self.read(
            step,
            url,
            None,
            method=method,
            extra=headers,
            body=body,
            absent_when=spec.get("absent_when"),
        )
        docs = [parse_json(read.response.body)] if read.response is not None else []
        return Pages(read, docs, True)

    async def pages(self, step: Step, url: str, paging: dict[str, Any] | None) -> Pages:
        """The listing at `url` and its further pages, as `paging` says how to find them:
        `{"cursor": [path to the next cursor], "param": "cursor"}`, or `{"link": true}` for
        `Link: rel="next"`. Without `paging` only `url` is read."""
        first = await self.read(step, url, None)
        if first.state != PRESENT or first.response is None or not paging:
            return Pages(first, [parse_json(first.response.body)] if first.response else [], True)
        docs = [parse_json(first.response.body)]
        current, seen = first, {url}
        for _ in range(MAX_PAGES - 1):
            following = _next_page(url, current, docs[-1], paging)
            if following is None or following in seen:
                return Pages(first, docs, True)
            if origin(following) != origin(url):
                return Pages(first, docs, False)  # never follow a listing to another host
            seen.add(following)
            current = await self.read(step, following, None)
            if current.state != PRESENT or current.response is None:
                return Pages(current, docs, False)
            docs.append(parse_json(current.response.body))
        return Pages(first, docs, _next_page(url, current, docs[-1], paging) is None)


def _next_page(url: str, read: Read, doc: Any, paging: dict[str, Any]) -> str | None:
    """The URL of the page after `read`, or None when it was the last."""
    if paging.get("link") and read.response is not None:
        link = read.response.header("Link") or ""
        for part in link.split(","):
            target, _, params = part.partition(";")
            if 'rel="next"' in params.replace(" ", "") or "rel=next" in params.replace(" ", ""):
                return urljoin(url, target.strip().strip("<>"))
        return None
    path = paging.get("cursor")
    if not isinstance(path, list):
        return None
    value: Any = doc
    for key in path:
        value = value.get(key) if isinstance(value, dict) else None
    if not isinstance(value, str) or not value:
        return None
    parts = urlsplit(url)
    query = [
        (k, v)
        for k, v in parse_qsl(parts.query, keep_blank_values=True)
        if k != paging.get("param", "cursor")
    ]
    query.append((str(paging.get("param", "cursor")), value))
    return urlunsplit((parts.scheme, parts.netloc, parts.path, urlencode(query), ""))
