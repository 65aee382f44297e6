"""Host patterns and path templates, compiled once when the rules load."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_GLOB_CHARS = frozenset("*?[")
_CAPTURE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_SEGMENT_TOKEN = re.compile(r"\{([^{}]*)\}|\*|[{}]")


@dataclass(frozen=True)
class HostPattern:
    """`api.example.com`, `*.example.com` or either with `:port`; case-insensitive.

    `*` matches any run of characters including dots, so `*.example.com` matches every
    subdomain at any depth (but not `example.com` itself). The port only counts when given.
    """

    text: str
    host: str
    port: int | None
    regex: re.Pattern[str] | None = field(default=None, compare=False)

    @classmethod
    def parse(cls, text: str) -> HostPattern:
        """Compile a pattern; raises ValueError with a user-facing message."""
        raw = text.strip().lower()
        if not raw:
            raise ValueError("host must not be empty")
        if "://" in raw or "/" in raw:
            raise ValueError(f"host is a host name like api.example.com, not a URL: {text!r}")
        host, port = _split_port(raw)
        host = host.rstrip(".")
        if not host:
            raise ValueError(f"host has no name: {text!r}")
        regex = _glob_regex(host) if _GLOB_CHARS & set(host) else None
        return cls(text=text, host=host, port=port, regex=regex)

    @property
    def exact(self) -> bool:
        """True when the pattern has no glob characters (so it can be looked up by key)."""
        return self.regex is None

    def matches(self, host: str, port: int) -> bool:
        """Does a request to `host:port` (host already lower-case) match?"""
        if self.port is not None and self.port != port:
            return False
        if self.regex is None:
            return host == self.host
        return self.regex.match(host) is not None


def _split_port(raw: str) -> tuple[str, int | None]:
    if raw.startswith("["):  # [::1]:8443
        end = raw.find("]")
        if end < 0:
            raise ValueError(f"unclosed [ in host {raw!r}")
        rest = raw[end + 1 :]
        if rest and not rest.startswith(":"):
            raise ValueError(f"unexpected text after ] in host {raw!r}")
        return raw[1:end], _port(rest[1:], raw) if rest else None
    if raw.count(":") == 1:
        host, _, port = raw.partition(":")
        return host, _port(port, raw)
    return raw, None


def _port(text: str, raw: str) -> int:
    if not text.isdigit() or not 0 < int(text) < 65536:
        raise ValueError(f"invalid port in host {raw!r}")
    return int(text)


def _glob_regex(glob: str) -> re.Pattern[str]:
    out = []
    i = 0
    while i < len(glob):
        c = glob[i]
        if c == "*":
            out.append(".*")
        elif c == "?":
            out.append(".")
        elif c == "[":
            end = glob.find("]", i + 1)
            if end < 0:
                raise ValueError(f"unclosed [ in host pattern {glob!r}")
            body = glob[i + 1 : end]
            out.append("[^" + re.escape(body[1:]) + "]" if body.startswith("!") else f"[{body}]")
            i = end
        else:
            out.append(re.escape(c))
        i += 1
    try:
        return re.compile("".join(out) + r"\Z")
    except re.error as exc:
        raise ValueError(f"invalid host pattern {glob!r}: {exc}") from None


@dataclass(frozen=True)
class PathTemplate:
    """`/repos/{owner}/{repo}/issues`, `/files/*/raw`, `/admin/**`.

    `{name}` captures one segment (or part of one: `/files/{name}.json`), `*` matches within one
    segment without capturing, a `**` segment matches any number of segments including none.
    A trailing slash on either side is ignored; the query string is never part of the path.
    """

    text: str
    captures: tuple[str, ...]
    regex: re.Pattern[str] = field(compare=False)
    literal: str | None = None  # set when the template has no wildcard: compare as a string
    first_segment: str | None = None  # set when the first segment is literal text (for indexing)

    @classmethod
    def parse(cls, text: str) -> PathTemplate:
        """Compile a template; raises ValueError with a user-facing message."""
        if not text.startswith("/"):
            raise ValueError(f"path must start with /: {text!r}")
        if "?" in text or "#" in text:
            raise ValueError(
                f"path must not contain ? or #: match the query with `query`: {text!r}"
            )
        segments = text.rstrip("/").split("/")[1:]
        captures: list[str] = []
        pattern = ""
        for seg in segments:
            if seg == "":
                raise ValueError(f"empty segment (//) in path {text!r}")
            if seg == "**":
                pattern += "(?:/.*)?"
                continue
            if "**" in seg:
                raise ValueError(f"** must be a whole segment, as in /files/**: {text!r}")
            pattern += "/" + _segment_regex(seg, text, captures)
        if not pattern:
            pattern = "/?"  # the template `/` matches the root
        literal = None if "{" in text or "*" in text else (text.rstrip("/") or "/")
        first = segments[0] if segments else ""
        indexable = not ("{" in first or "*" in first)
        return cls(
            text,
            tuple(captures),
            re.compile(pattern + r"/?\Z"),
            literal,
            first if indexable else None,
        )

    def match(self, path: str) -> dict[str, str] | None:
        """The captures if `path` (already normalized, no query) matches, else None."""
        if self.literal is not None:
            trimmed = path.rstrip("/") or "/"
            return {} if trimmed == self.literal else None
        m = self.regex.match(path)
        return m.groupdict() if m else None


def _segment_regex(seg: str, template: str, captures: list[str]) -> str:
    out = []
    pos = 0
    for m in _SEGMENT_TOKEN.finditer(seg):
        out.append(re.escape(seg[pos : m.start()]))
        pos = m.end()
        token = m.group(0)
        if token == "*":
            # A whole-segment * needs something there, so /items/* does not match /items/.
            out.append("[^/]+" if seg == "*" else "[^/]*")
        elif m.group(1) is None:
            raise ValueError(f"unbalanced {token!r} in path {template!r}")
        else:
            name = m.group(1).strip()
            if not _CAPTURE_NAME.match(name):
                raise ValueError(f"invalid capture name {{{name}}} in path {template!r}")
            if name in captures:
                raise ValueError(f"capture {{{name}}} appears twice in path {template!r}")
            captures.append(name)
            out.append(f"(?P<{name}>[^/]+)")
    out.append(re.escape(seg[pos:]))
    return "".join(out)
