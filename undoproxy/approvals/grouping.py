"""Which held requests are the same request, and what of one a person is shown.

One approval covers several held requests of a session only when they are byte-identical as
the upstream would receive them: method, URL, body and every header (names compared without
case; hop-by-hop headers, Content-Length and undoproxy's own `X-Undoproxy-*` headers, which
are never forwarded, left out). So an approval never covers a request with another
`Authorization` or an `X-HTTP-Method-Override` it did not show.

The key is an HMAC under a key made when the process starts: credentials go into it only
hashed, and the stored key cannot be used to guess them offline. The card shows every
forwarded header, secret ones as `[redacted · tag]` where the tag (from the same HMAC) tells
two different credentials apart without revealing either, and calls out method overrides
(`X-HTTP-Method-Override`, `X-HTTP-Method`, `X-Method-Override`, `_method` in the query or
in a form or JSON body): the upstream may act on them instead of the method shown.

Plain data in, plain data out (no mitmproxy): the holding addon calls

    key = grouping_key(method, url, headers.items(multi=True), raw_body)
    context.update(card_context(url, headers.items(multi=True), body, content_type))
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
from collections.abc import Iterable
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from undoproxy import redact

Headers = Iterable[tuple[str, str]]

NOT_FORWARDED = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authorization",
        "proxy-authenticate",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "content-length",  # follows from the body, which is compared itself
    }
)
OVERRIDE_HEADERS = ("x-http-method-override", "x-http-method", "x-method-override")
OVERRIDE_FIELD = "_method"
MAX_HEADERS_SHOWN = 100
MAX_VALUE_SHOWN = 2000
TAG_LENGTH = 8
_KEY = secrets.token_bytes(32)  # per process: pending approvals do not outlive it


def _forwarded(headers: Headers) -> list[tuple[str, str]]:
    """The headers the upstream gets, names lowercased, in order (stable by name)."""
    kept = [
        (name.lower(), value)
        for name, value in headers
        if name.lower() not in NOT_FORWARDED and not name.lower().startswith("x-undoproxy-")
    ]
    return sorted(kept, key=lambda item: item[0])  # stable: repeated names keep their order


def _field(mac: hmac.HMAC, value: str | bytes) -> None:
    data = value.encode("utf-8", "surrogateescape") if isinstance(value, str) else value
    mac.update(b"%d:" % len(data))
    mac.update(data)


def grouping_key(method: str, url: str, headers: Headers, body: bytes | None) -> str:
    """A key equal for two requests exactly when the upstream would receive the same thing.

    `url` is the full URL as forwarded (not redacted), `headers` every (name, value) pair
    (repeats included), `body` the raw body bytes.
    """
    mac = hmac.new(_KEY, digestmod=hashlib.sha256)
    _field(mac, method.upper())
    _field(mac, url)
    forwarded = _forwarded(headers)
    _field(mac, str(len(forwarded)))
    for name, value in forwarded:
        _field(mac, name)
        _field(mac, value)
    _field(mac, body or b"")
    return mac.hexdigest()


def credential_tag(value: str) -> str:
    """A short tag that differs between two secrets without revealing either."""
    mac = hmac.new(_KEY, value.encode("utf-8", "surrogateescape"), hashlib.sha256)
    return mac.hexdigest()[:TAG_LENGTH]


def shown_headers(headers: Headers) -> list[dict[str, Any]]:
    """The forwarded headers as the card shows them: `{name, value, secret, override}`."""
    shown: list[dict[str, Any]] = []
    for name, value in headers:
        low = name.lower()
        if low in NOT_FORWARDED - {"content-length"} or low.startswith("x-undoproxy-"):
            continue
        secret = redact.is_secret_name(name)
        if secret:
            value = f"{redact.REDACTED} · {credential_tag(value)}"
        elif len(value) > MAX_VALUE_SHOWN:
            value = value[:MAX_VALUE_SHOWN] + "… (truncated)"
        shown.append(
            {"name": name, "value": value, "secret": secret, "override": low in OVERRIDE_HEADERS}
        )
        if len(shown) == MAX_HEADERS_SHOWN:
            shown.append(
                {"name": "…", "value": "more headers not shown", "secret": False, "override": False}
            )
            break
    return shown


def _body_fields(body: bytes | None, content_type: str) -> list[tuple[str, str]]:
    if not body:
        return []
    media = content_type.split(";")[0].strip().lower()
    text = body.decode("utf-8", "replace")
    if media == "application/x-www-form-urlencoded":
        return parse_qsl(text, keep_blank_values=True)
    if media == "application/json" or media.endswith("+json"):
        try:
            parsed = json.loads(text)
        except (ValueError, RecursionError):  # too deep to parse: nothing to call out
            return []
        if isinstance(parsed, dict) and OVERRIDE_FIELD in parsed:
            return [(OVERRIDE_FIELD, str(parsed[OVERRIDE_FIELD]))]
    return []


def method_overrides(
    url: str, headers: Headers, body: bytes | None, content_type: str = ""
) -> list[dict[str, str]]:
    """Every place the request asks the upstream to act as another method:
    `{where, method}`, e.g. `{"where": "header X-HTTP-Method-Override", "method": "DELETE"}`."""
    found: list[dict[str, str]] = []

    def add(where: str, value: str) -> None:
        found.append({"where": where, "method": value.strip()[:32]})

    for name, value in headers:
        if name.lower() in OVERRIDE_HEADERS:
            add(f"header {name}", value)
    for name, value in parse_qsl(urlsplit(url).query, keep_blank_values=True):
        if name == OVERRIDE_FIELD:
            add(f"query {OVERRIDE_FIELD}", value)
    for name, value in _body_fields(body, content_type):
        if name == OVERRIDE_FIELD:
            add(f"body {OVERRIDE_FIELD}", value)
    return found


def card_context(
    url: str, headers: Headers, body: bytes | None, content_type: str = ""
) -> dict[str, Any]:
    """What an approval's context gains for the card: `headers` and `method_overrides`."""
    pairs = list(headers)
    return {
        "headers": shown_headers(pairs),
        "method_overrides": method_overrides(url, pairs, body, content_type),
    }
