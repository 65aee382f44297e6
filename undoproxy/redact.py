"""What counts as a secret and how it is hidden: one place for the journal, API, page, exports.

Secrets are never written in clear to the journal's readable columns: header values and query
parameters with secret-looking names, and JSON body fields with secret-looking keys, become
`[redacted]`. The credentials needed to replay a compensation are kept apart, encrypted
(see `credentials.py`).
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

REDACTED = "[redacted]"

# Headers that authenticate the agent upstream: kept (encrypted) for replaying compensations.
CREDENTIAL_HEADERS = frozenset(
    {
        "authorization",
        "cookie",
        "x-api-key",
        "api-key",
        "x-auth-token",
        "x-access-token",
        "private-token",
        "x-goog-api-key",
        "openai-organization",
        "anthropic-api-key",
    }
)
_SECRET_NAME = re.compile(
    r"(auth|token|secret|password|passwd|api[-_]?key|apikey|cookie|session|signature|"
    r"credential|private[-_]?key|client[-_]?secret|card[-_]?number|cvc|cvv)",
    re.IGNORECASE,
)


@functools.lru_cache(maxsize=4096)  # called for every header of every request: names repeat
def is_secret_name(name: str) -> bool:
    """True for header, query or field names that usually carry a secret."""
    return name.lower() in CREDENTIAL_HEADERS or bool(_SECRET_NAME.search(name))


def headers(items: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
    """Header pairs with secret values replaced."""
    return [(k, REDACTED if is_secret_name(k) else v) for k, v in items]


def credential_headers(items: Iterable[tuple[str, str]]) -> dict[str, str]:
    """The headers that must be kept (encrypted) to send a compensation as the agent."""
    out: dict[str, str] = {}
    for k, v in items:
        if k.lower() in CREDENTIAL_HEADERS or is_secret_name(k):
            out[k] = v
    return out


def url(value: str) -> str:
    """The URL with userinfo and secret query parameters hidden."""
    parts = urlsplit(value)
    netloc = parts.netloc
    if "@" in netloc:
        netloc = REDACTED + "@" + netloc.rsplit("@", 1)[1]
    query = parts.query
    if query:
        pairs = parse_qsl(query, keep_blank_values=True)
        if any(is_secret_name(k) for k, _ in pairs):
            query = urlencode([(k, REDACTED if is_secret_name(k) else v) for k, v in pairs])
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def json_value(value: Any) -> Any:
    """A JSON value with secret-named fields replaced, recursively."""
    if isinstance(value, Mapping):
        return {
            k: REDACTED
            if is_secret_name(str(k)) and not isinstance(v, Mapping | list)
            else json_value(v)
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [json_value(v) for v in value]
    return value


def body_text(body: bytes | None, content_type: str = "") -> str | None:
    """A body for display: JSON with secret fields redacted, text as is, binary summarised."""
    if body is None:
        return None
    if not body:
        return ""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        return f"<{len(body)} bytes of binary data>"
    try:
        return json.dumps(json_value(json.loads(text)), indent=2, ensure_ascii=False)
    except ValueError:
        pass
    if "x-www-form-urlencoded" in content_type:
        pairs = parse_qsl(text, keep_blank_values=True)
        return urlencode([(k, REDACTED if is_secret_name(k) else v) for k, v in pairs])
    return text
