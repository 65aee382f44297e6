"""Requests whose head cannot be forwarded as it is read: CR, LF or NUL where no line may break.

RFC 9110 section 5.5: "Field values containing CR, LF, or NUL characters are invalid and
dangerous, due to the varying ways that implementations might parse and interpret those
characters; a recipient of CR, LF, or NUL within a field value MUST either reject the message
or replace each of those characters with SP". mitmproxy does neither:

- HTTP/1 (its reader splits the head on LF, as h11 does): a bare CR inside a line stays in the
  value, and so does a NUL; an obs-fold (a line starting with SP or HTAB) is joined to the
  previous value as `\\r\\n ` (RFC 9112 section 5.2: reject it, or replace it with SP). A
  header name is whatever comes before the first colon, spaces included.
- HTTP/2 (HPACK carries any octet; h2 checks case and surrounding whitespace, not these):
  CR, LF and NUL arrive intact in names, values and `:path`.

Either way it would be written to an HTTP/1 upstream as it is: a second header, or a second
request, that no rule saw. So undoproxy refuses such a request (400 `undoproxy_bad_request`)
before anything else looks at it: names must be RFC 9110 tokens, values and the request
target free of CR, LF and NUL (the target of any control character and of spaces too).
Trailers are checked the same way once the body is read.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Final

_TOKEN: Final = re.compile(rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+\Z")
_BAD_IN_VALUE: Final = re.compile(rb"[\r\n\x00]")
_BAD_IN_TARGET: Final = re.compile(rb"[\x00-\x20\x7f]")


def bad_field(fields: Iterable[tuple[bytes, bytes]], what: str = "header") -> str | None:
    """Why these header (or trailer) fields cannot be forwarded, or None when they can."""
    for name, value in fields:
        if not _TOKEN.match(name):
            return f"invalid {what} name {_shown(name)}: only RFC 9110 token characters"
        if _BAD_IN_VALUE.search(value):
            return (
                f"{what} {_shown(name)} has CR, LF or NUL in its value (or a folded line): "
                "refused, as RFC 9110 allows, rather than forwarded"
            )
    return None


def bad_target(target: bytes) -> str | None:
    """Why a request target (path and query, or authority) cannot be forwarded, or None."""
    if _BAD_IN_TARGET.search(target):
        return "the request target has a control character or a space in it"
    return None


def bad_method(method: bytes) -> str | None:
    """Why a request method cannot be forwarded (it is not an RFC 9110 token), or None."""
    if not _TOKEN.match(method):
        return f"invalid method {_shown(method)}: only RFC 9110 token characters"
    return None


def _shown(name: bytes) -> str:
    """A header name as a message may show it: escaped, and short."""
    text = repr(name[:64])[2:-1]
    return f"'{text}'" + ("..." if len(name) > 64 else "")
