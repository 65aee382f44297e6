"""`RequestView`: the plain, read-only picture of one request that rules are matched against.

Built once per proxied request, so it does as little as possible up front: the URL is split,
the headers are copied into a lower-case dict, and the query string and the JSON body are only
parsed the first time a rule asks for them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from typing import Any, Final
from urllib.parse import parse_qsl, urljoin, urlsplit

from undoproxy import redact

DEFAULT_PORTS: Final = {"http": 80, "https": 443}

# RFC 3986 unreserved characters: percent-encoding them changes nothing for the server, so a
# rule on `/admin/**` must not be sidestepped by writing `/%61dmin/`.
_PERCENT = re.compile(r"%([0-9A-Fa-f]{2})")
_UNRESERVED = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")


class _NotJson:
    """Type of the `NOT_JSON` sentinel."""

    _instance: _NotJson | None = None

    def __new__(cls) -> _NotJson:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "NOT_JSON"

    def __bool__(self) -> bool:
        return False


NOT_JSON: Final = _NotJson()
"""`RequestView.json` when the body is empty or is not JSON (distinct from a JSON `null`)."""

_UNPARSED: Final = object()


def normalize_path(path: str) -> str:
    """The path as rules see it: no query, unreserved escapes decoded, dot segments resolved."""
    if not path:
        return "/"
    if "%" in path:
        path = _PERCENT.sub(_decode_unreserved, path)
    if "/." in path:
        path = _remove_dot_segments(path)
    return path


def _decode_unreserved(m: re.Match[str]) -> str:
    char = chr(int(m.group(1), 16))
    return char if char in _UNRESERVED else "%" + m.group(1).upper()


def _remove_dot_segments(path: str) -> str:
    out: list[str] = []
    segments = path.split("/")
    for i, seg in enumerate(segments):
        last = i == len(segments) - 1
        if seg == ".":
            if last:
                out.append("")
        elif seg == "..":
            if len(out) > 1:
                out.pop()
            if last:
                out.append("")
        else:
            out.append(seg)
    result = "/".join(out)
    return result if result.startswith("/") else "/" + result


def _host_port(netloc: str, default_port: int, url: str) -> tuple[str, int]:
    """Lower-case host (no brackets, no trailing dot) and port of a URL's authority.

    Done by hand because SplitResult.hostname and .port each re-split the netloc, and this
    runs for every proxied request.
    """
    hostport = netloc.rpartition("@")[2]
    if hostport.startswith("["):
        host, bracket, rest = hostport[1:].partition("]")
        if not bracket or (rest and not rest.startswith(":")):
            raise ValueError(f"invalid IPv6 host in URL: {redact.url(url)!r}")
        port_text = rest[1:]
    else:
        host, _, port_text = hostport.partition(":")
    host = host.lower().rstrip(".")
    if not host:
        raise ValueError(f"URL has no host: {redact.url(url)!r}")
    if not port_text:
        return host, default_port
    if not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise ValueError(f"invalid port in URL: {redact.url(url)!r}")
    return host, int(port_text)


class RequestView:
    """One request as plain data: method, URL parts, lower-case headers, body bytes.

    `path` is normalized (see `normalize_path`) but keeps its remaining percent-escapes, so a
    capture taken from it can be put straight back into a URL.
    """

    __slots__ = (
        "_duplicates",
        "_json",
        "_query",
        "body",
        "body_problem",
        "headers",
        "host",
        "mcp_annotations",
        "method",
        "path",
        "port",
        "raw_query",
        "scheme",
        "url",
    )

    def __init__(
        self,
        method: str,
        scheme: str,
        host: str,
        port: int,
        path: str,
        raw_query: str,
        headers: dict[str, str],
        body: bytes,
        url: str,
        body_problem: str | None = None,
    ) -> None:
        self.method = method
        self.scheme = scheme
        self.host = host
        self.port = port
        self.path = path
        self.raw_query = raw_query
        self.headers = headers
        self.body = body
        self.url = url
        # Why the body as the upstream will read it is unknown (a content coding that could
        # not be decoded, a body too large to judge): see `ambiguous`.
        self.body_problem = body_problem
        # The annotations the MCP server gave the tool this request calls, as its tools/list
        # answer said in this session (proxy/mcp.py); None when unknown.
        self.mcp_annotations: dict[str, Any] | None = None
        self._query: list[tuple[str, str]] | None = None
        self._json: Any = _UNPARSED
        self._duplicates: tuple[str, ...] = ()

    @classmethod
    def from_parts(
        cls,
        method: str,
        url: str,
        headers: Mapping[str, str] | Iterable[tuple[str, str]],
        body: bytes,
        body_problem: str | None = None,
    ) -> RequestView:
        """Build a view from an absolute http(s) URL; raises ValueError for anything else.

        `body` is the body as the upstream will read it (content codings decoded, see
        `undoproxy.codings`); `body_problem` says why that is unknown, when it is.
        """
        parts = urlsplit(url)
        scheme = parts.scheme  # urlsplit lower-cases it
        if scheme not in DEFAULT_PORTS:
            raise ValueError(f"not an absolute http(s) URL: {redact.url(url)!r}")
        host, port = _host_port(parts.netloc, DEFAULT_PORTS[scheme], url)
        pairs = headers.items() if isinstance(headers, Mapping) else headers
        folded: dict[str, str] = {}
        for name, value in pairs:
            key = name.lower()
            # Repeated headers read as one comma-joined value, as RFC 9110 allows for lists.
            folded[key] = f"{folded[key]}, {value}" if key in folded else value
        return cls(
            method=method.upper(),
            scheme=scheme,
            host=host,
            port=port,
            path=normalize_path(parts.path),
            raw_query=parts.query,
            headers=folded,
            body=body or b"",
            url=url,
            body_problem=body_problem,
        )

    @property
    def query(self) -> list[tuple[str, str]]:
        """Decoded query parameters in order; repeats kept; `?flag` gives `("flag", "")`."""
        if self._query is None:
            self._query = parse_qsl(self.raw_query, keep_blank_values=True)
        return self._query

    @property
    def json(self) -> Any:
        """The parsed JSON body, or `NOT_JSON` when the body is empty or does not parse.

        Parsed regardless of Content-Type (agents often omit it), and only once. A body whose
        `body_problem` is set is not parsed: what it says is unknown.
        """
        if self._json is _UNPARSED:
            if self.body_problem is not None or not self.body.strip():
                self._json = NOT_JSON
            else:
                seen: list[str] = []

                def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
                    obj = dict(items)
                    if len(obj) != len(items):
                        names = [k for k, _ in items]
                        seen.extend(k for k in obj if names.count(k) > 1)
                    return obj

                try:
                    self._json = json.loads(self.body, object_pairs_hook=pairs)
                except (ValueError, RecursionError):
                    self._json = NOT_JSON
                self._duplicates = tuple(dict.fromkeys(seen))
        return self._json

    @property
    def duplicate_keys(self) -> tuple[str, ...]:
        """Keys that appear twice in one object of the JSON body (`{"a": 1, "a": 2}`).

        Such a body means different things to different parsers (Python and most servers
        keep the last value, some the first): rules treat it as ambiguous.
        """
        _ = self.json
        return self._duplicates

    @property
    def ambiguous(self) -> str | None:
        """Why rules cannot know what the body says, or None.

        A body the upstream may read differently than undoproxy can (duplicate JSON keys, a
        content coding undoproxy could not decode, a body too large to judge) matches every
        rule that would stop it (hold, deny) and no rule that would let it through, whatever
        their body conditions say (rules/matcher.py).
        """
        if self.body_problem is not None:
            return self.body_problem
        if self.duplicate_keys:
            return f"body has duplicate keys ({', '.join(self.duplicate_keys)})"
        return None

    @property
    def origin(self) -> str:
        """`scheme://host[:port]`, the port omitted when it is the scheme's default."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        if DEFAULT_PORTS[self.scheme] == self.port:
            return f"{self.scheme}://{host}"
        return f"{self.scheme}://{host}:{self.port}"

    def resolve(self, url: str) -> str:
        """An absolute URL for `url`; a relative one goes to this request's scheme, host, port."""
        return urljoin(self.origin + "/", url)

    def __repr__(self) -> str:
        return f"RequestView({self.method} {self.url})"
