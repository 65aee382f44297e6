"""What counts as a secret and how it is hidden: one place for the journal, API, page, exports.

Secrets are never shown in clear: header values, query and form parameters, JSON fields,
`name=value` pairs in text and URL userinfo whose names look secret become `[redacted]`. The
credentials needed to replay a compensation are kept apart, encrypted (see `credentials.py`).

Names are judged by their parts (`x-api-key` -> `x api key`, `accessToken` -> `access token`),
never by substring, so that redaction does not destroy meaning: `max_tokens`, `prompt_tokens`,
`tokenizer`, `key_count`, `status_code` and `monkey` stay readable while `key`, `code`,
`sig`, `client_secret` and `X-Amz-Security-Token` are hidden.

Nothing here raises on hostile input: every function takes any text (a body of 100,000 `[`,
a URL that does not parse) and runs in time linear in its length. JSON nested deeper than
`MAX_DEPTH` is not parsed; it is shown truncated, with a note.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import unquote_plus

REDACTED = "[redacted]"
REDACTED_IN_URL = "%5Bredacted%5D"  # REDACTED percent-encoded, so the URL stays valid
MAX_DEPTH = 64  # JSON nested deeper than this is not parsed
EXCERPT = 2000  # characters of a body that is not parsed that are still shown
TOO_DEEP = f"[truncated: nested deeper than {MAX_DEPTH} levels]"

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

# A name is secret when one of its parts is here (`api_key`, `X-Amz-Signature`, `accessToken`),
# including the usual run-together spellings.
SECRET_PARTS = frozenset(
    {
        "password", "passwd", "pwd", "passphrase", "passcode",
        "secret", "secrets", "token", "auth", "authorization", "authentication", "credential",
        "credentials",
        "cookie", "cookies", "session", "signature", "sig", "key", "apikey", "jwt", "bearer",
        "otp", "totp", "cvc", "cvv", "csrf", "xsrf",
        "accesstoken", "refreshtoken", "idtoken", "authtoken", "sessiontoken", "csrftoken",
        "xsrftoken", "csrfmiddlewaretoken", "sessionid", "sessid", "phpsessid", "jsessionid",
        "sessionkey", "secretkey", "privatekey", "accesskey", "clientsecret", "apisecret",
    }
)  # fmt: skip
# Parts that describe a secret rather than hold it, when they follow it: `token_type`,
# `key_count`, `password_min_length`, `auth_url`, `session_timeout`.
DESCRIPTOR_PARTS = frozenset(
    {
        "count", "counts", "num", "number", "length", "len", "size", "limit", "limits", "max",
        "min", "total", "used", "usage", "remaining", "type", "types", "kind", "method",
        "methods", "scheme", "algorithm", "alg", "version", "format", "name", "names", "field",
        "param", "prefix", "hint", "url", "uri", "endpoint", "provider", "mode", "status",
        "required", "enabled", "policy", "ttl", "timeout", "duration", "lifetime", "expires",
        "expiry", "expiration", "ids", "logprob", "logprobs", "budget", "detail", "details",
        "info",
    }
)  # fmt: skip
# A name starting with one of these counts something: `max_token`, `num_keys`.
COUNTER_PREFIXES = frozenset({"max", "min", "num", "n", "total", "count"})
# Parts that are secrets only in some company.
_PLURALS = frozenset({"tokens", "keys"})  # `api_keys` yes, `prompt_tokens` no
_PLURAL_QUALIFIERS = frozenset(
    {"api", "access", "refresh", "id", "auth", "session", "bearer", "private", "secret",
     "signing", "client", "oauth", "encryption", "master", "deploy", "ssh"}
)  # fmt: skip
# `key` that names a field, a row or a public half, not a credential.
_PUBLIC_KEY_QUALIFIERS = frozenset(
    {"public", "publishable", "idempotency", "sort", "partition", "primary", "foreign",
     "cache", "routing", "row", "lookup", "dedup", "dedupe", "deduplication", "hash", "range",
     "object", "group", "shard", "map", "dict", "translation", "i18n", "react"}
)  # fmt: skip
# `token` that pages through results or makes a request idempotent.
_PUBLIC_TOKEN_QUALIFIERS = frozenset(
    {"page", "next", "prev", "previous", "continuation", "pagination", "sync", "cursor",
     "idempotency"}
)  # fmt: skip
# `key` and `token` name a credential at the end of a name (`api_key`, `access_token`); before
# another part only when that part is the credential's value (`key_material`), so that
# `key_points`, `key_id`, `token_ids` and `token_logprobs` keep their meaning.
_VALUE_PARTS = frozenset(
    {"value", "data", "material", "pem", "string", "text", "content", "base64", "b64", "bytes",
     "json", "hash", "raw", "plain", "plaintext", "encoded", "secret", "header"}
)  # fmt: skip
# `code` alone is an OAuth authorization code; `status_code` and `country_code` are not secret.
_CODE_QUALIFIERS = frozenset(
    {"oauth", "authorization", "verification", "verify", "otp", "mfa", "totp", "twofa",
     "device", "recovery", "backup", "reset", "confirmation", "confirm", "sms", "login",
     "security", "access", "onetime"}
)  # fmt: skip

_BOUNDARY = re.compile(
    r"[\W_]+"  # separators: - . _ space [ ] ...
    r"|(?<=[a-z0-9])(?=[A-Z])"  # apiKey
    r"|(?<=[A-Z])(?=[A-Z][a-z])"  # APIKey
    r"|(?<=[A-Za-z])(?=[0-9])|(?<=[0-9])(?=[A-Za-z])"  # key2, s3key
)


def name_parts(name: str) -> tuple[str, ...]:
    """A name's lower-case parts: `X-Amz-Security-Token` -> ('x', 'amz', 'security', 'token')."""
    return tuple(p.lower() for p in _BOUNDARY.split(name) if p)


def is_secret_name(name: str) -> bool:
    """True for header, query, form or field names that usually carry a secret."""
    if len(name) > 256:  # not worth caching; still judged, a long name can hide `password`
        return _is_secret_name(name)
    return _cached_is_secret_name(name)


def _is_secret_name(name: str) -> bool:
    if name.lower() in CREDENTIAL_HEADERS:
        return True
    parts = name_parts(name)
    if not parts or (parts[0] in COUNTER_PREFIXES and len(parts) > 1):
        return False
    # From the right: a descriptor after the secret part (`token_type`) wins.
    for i in range(len(parts) - 1, -1, -1):
        part = parts[i]
        before = parts[i - 1] if i else ""
        after = parts[i + 1] if i + 1 < len(parts) else ""
        if part == "number" and before == "card":
            return True
        if part in DESCRIPTOR_PARTS:
            return False
        if part in SECRET_PARTS:
            if part == "key" and before in _PUBLIC_KEY_QUALIFIERS:
                continue
            if part == "token" and before in _PUBLIC_TOKEN_QUALIFIERS:
                continue
            if part in ("key", "token") and after and after not in _VALUE_PARTS:
                continue
            return True
        if part in _PLURALS and before in _PLURAL_QUALIFIERS:
            return True
        if part == "code" and (
            len(parts) == 1 or before in _CODE_QUALIFIERS or after == "verifier"
        ):
            return True
    return False


# Called for every header of every request: names repeat.
_cached_is_secret_name = functools.lru_cache(maxsize=4096)(_is_secret_name)


# `name=` anywhere in text: query strings, form bodies, cookies, log lines. The lookbehind
# makes a name start where a name can start, so that scanning stays linear.
_NAME_EQ = re.compile(r"(?<![\w.\-\[\]%+])([\w.\-\[\]%+]++)[ \t]*+=[ \t]*+")
# A secret's value runs to the next space or `&`: over-hiding `;x=1` beats showing a tail.
_PAIR_VALUE = re.compile(r"\"[^\"]*+\"?|'[^']*+'?|[^\s&\"'<>]*+")
_USERINFO = re.compile(r"(?<=://)[^/?#\s\"'<>]*@")  # greedy: a password may hold an @
_HEADER_LINE = re.compile(r"(?m)^([ \t]*+[\w.\-]++[ \t]*+:[ \t]*+)([^\r\n]*+)")
_JSON_STRING = re.compile(r'"(?:[^"\\]++|\\.)*+"?', re.DOTALL)
_JSON_COLON = re.compile(r"\s*+:\s*+")
_JSON_SCALAR = re.compile(r"[^,}\]\s]*+")
_XML_ELEMENT = re.compile(r"<([\w:.\-]++)((?:\s[^<>]*+)?)>([^<]*+)</\1\s*>")
_URL_LIKE = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]{0,30}://\S*+\Z")
_SURROGATE = re.compile("[\ud800-\udfff]")
_FORM_LIKE = re.compile(r"[^=&\s]++(?:=[^&\s]*+)?(?:&[^=&\s]*+(?:=[^&\s]*+)?)*+")


def _pairs(value: str) -> str:
    """`name=value` pairs with secret names hidden; the scan goes on inside other values, so
    `next=https://x/?token=...` and `a=1;token=...` are caught too."""
    out: list[str] = []
    last = pos = 0
    while (m := _NAME_EQ.search(value, pos)) is not None:
        pos = m.end()
        if not is_secret_name(unquote_plus(m.group(1))):
            continue
        matched = _PAIR_VALUE.match(value, pos)
        end = matched.end() if matched else pos
        if value[pos:end] not in ("", REDACTED, REDACTED_IN_URL):
            out.append(value[last:pos] + REDACTED)
            last = end
        pos = end
    out.append(value[last:])
    return "".join(out)


def _inline(value: str) -> str:
    """Userinfo in URLs and secret `name=value` pairs hidden; everything else as written."""
    if "://" in value:
        value = _USERINFO.sub(REDACTED_IN_URL + "@", value)
    if "=" in value:
        value = _pairs(value)
    return value


def headers(items: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
    """Header pairs with secret values replaced (and secrets inside URLs in other values)."""
    return [(k, REDACTED if is_secret_name(k) else _inline(v)) for k, v in items]


def credential_headers(items: Iterable[tuple[str, str]]) -> dict[str, str]:
    """The headers that must be kept (encrypted) to send a compensation as the agent."""
    return {k: v for k, v in items if is_secret_name(k)}


def query(text: str) -> str:
    """A query string or form body with secret values hidden; other pairs stay as written."""
    pieces = re.split(r"([&;])", text)
    for i in range(0, len(pieces), 2):
        name, eq, value = pieces[i].partition("=")
        if (
            eq
            and value not in ("", REDACTED, REDACTED_IN_URL)
            and is_secret_name(unquote_plus(name))
        ):
            pieces[i] = name + "=" + REDACTED_IN_URL
    return "".join(pieces)


def url(value: str) -> str:
    """The URL with userinfo and secret query, fragment and path parameters hidden.

    Works on any text (a URL that does not parse is still redacted) and re-encodes nothing.
    """
    rest, hash_, fragment = value.partition("#")
    rest, mark, query_text = rest.partition("?")
    start = 0
    scheme_end = rest.find("://")
    if scheme_end != -1:
        start = scheme_end + 3
    elif rest.startswith("//"):
        start = 2
    if start:
        end = len(rest)
        slash = rest.find("/", start)
        if slash != -1:
            end = slash
        at = rest.rfind("@", start, end)
        if at != -1:
            rest = rest[:start] + REDACTED_IN_URL + rest[at:]
    if ";" in rest:  # path parameters: /app;jsessionid=...
        head, semi, params = rest.partition(";")
        rest = head + semi + query(params)
    if mark:
        query_text = query(query_text)
    if hash_ and "=" in fragment:  # the OAuth implicit flow puts access_token here
        fragment = query(fragment)
    return rest + mark + query_text + hash_ + fragment


class TooDeep(ValueError):
    """JSON nested deeper than `MAX_DEPTH`."""


def loads(text: str | bytes) -> Any:
    """Parse JSON; ValueError when it is not JSON, TooDeep when nested deeper than MAX_DEPTH.

    Never RecursionError: `json.loads` raises that on deep input, and a check after parsing
    catches what it let through.
    """
    value = _parse(text)
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        children = (
            item.values() if isinstance(item, dict) else item if isinstance(item, list) else ()
        )
        for child in children:
            if isinstance(child, dict | list):
                if depth >= MAX_DEPTH:
                    raise TooDeep(f"JSON nested deeper than {MAX_DEPTH} levels")
                stack.append((child, depth + 1))
    return value


def _parse(text: str | bytes) -> Any:
    try:
        return json.loads(text)
    except RecursionError:
        raise TooDeep(f"JSON nested deeper than {MAX_DEPTH} levels") from None


def json_value(value: Any) -> Any:
    """A JSON value with everything under secret-named fields replaced, whole.

    Strings that are URLs are redacted as URLs; `{"name": "DB_PASSWORD", "value": ...}` and
    `{"Key": "api_key", "Value": ...}` hide their value. Containers nested deeper than
    MAX_DEPTH are replaced by a note.
    """
    return _walk(value, 0, strict=False)


def _walk(value: Any, depth: int, *, strict: bool) -> Any:
    if isinstance(value, Mapping | list | tuple) and depth >= MAX_DEPTH:
        if strict:
            raise TooDeep(f"JSON nested deeper than {MAX_DEPTH} levels")
        return TOO_DEEP
    if isinstance(value, Mapping):
        hidden = _named_value(value)
        return {
            k: REDACTED
            if k == hidden or is_secret_name(str(k))
            else _walk(v, depth + 1, strict=strict)
            for k, v in value.items()
        }
    if isinstance(value, list | tuple):
        return [_walk(v, depth + 1, strict=strict) for v in value]
    if isinstance(value, str) and "://" in value and _URL_LIKE.match(value):
        return url(value)
    if isinstance(value, str) and "=" in value:
        # A form or a query inside a string (an echoed request, a webhook payload): its
        # secret-named pairs are hidden too.
        return _pairs(value)
    return value


def _named_value(pair: Mapping[Any, Any]) -> str | None:
    """`value` of `{"name": "DB_PASSWORD", "value": ...}` (env vars, AWS tags, HAR headers)."""
    for name_key, value_key in _NAME_VALUE_KEYS:
        named = pair.get(name_key)
        if isinstance(named, str) and value_key in pair and is_secret_name(named):
            return value_key
    return None


_NAME_VALUE_KEYS = (("name", "value"), ("key", "value"), ("Name", "Value"), ("Key", "Value"))


def _json_text(text: str) -> str:
    """`"secret": value` hidden in text that is JSON-like but not parsed (too deep, NDJSON).

    A secret whose value is an object or a list cannot be cut out without parsing it, so the
    text is cut there.
    """
    if '"' not in text:
        return text
    out: list[str] = []
    last = pos = 0
    while (m := _JSON_STRING.search(text, pos)) is not None:
        pos = m.end()
        colon = _JSON_COLON.match(text, pos)
        if colon is None or not is_secret_name(_json_key(m.group(0))):
            continue
        start = colon.end()
        first = text[start : start + 1]
        if first in ("{", "["):
            out.append(text[last:start] + f'"{REDACTED}" … [cut: the rest is not shown]')
            return "".join(out)
        matched = (_JSON_STRING if first == '"' else _JSON_SCALAR).match(text, start)
        end = matched.end() if matched else len(text)
        out.append(text[last:start] + f'"{REDACTED}"')
        last = pos = end
    out.append(text[last:])
    return "".join(out)


def _json_key(token: str) -> str:
    try:
        key = json.loads(token)
    except ValueError:
        return token.strip('"')
    return key if isinstance(key, str) else ""


def _header_line(m: re.Match[str]) -> str:
    name = m.group(1).strip().rstrip(":").strip()
    if not m.group(2) or not is_secret_name(name):
        return m.group(0)
    return m.group(1) + REDACTED


def _xml_element(m: re.Match[str]) -> str:
    if not m.group(3) or not is_secret_name(m.group(1).rpartition(":")[2]):
        return m.group(0)
    return f"<{m.group(1)}{m.group(2)}>{REDACTED}</{m.group(1)}>"


def text(value: str) -> str:
    """Free text (an error, a log line, a text body) with the secrets it carries hidden.

    Hides URL userinfo, `name=value` pairs, `Name: value` lines, `"name": value` members and
    `<name>value</name>` elements whose names look secret.
    """
    value = _inline(value)
    if ":" in value:
        value = _HEADER_LINE.sub(_header_line, value)
    if "</" in value:
        value = _XML_ELEMENT.sub(_xml_element, value)
    return _json_text(value)


def _multipart(body: str, boundary: str) -> str:
    """A multipart/form-data body with the content of secret-named parts hidden."""
    delimiter = "--" + boundary
    parts = body.split(delimiter)
    for i, part in enumerate(parts):
        head, sep, content = part.partition("\r\n\r\n")
        if not sep:
            head, sep, content = part.partition("\n\n")
        names = re.findall(r'\bname="([^"]*)"', head)
        if sep and any(is_secret_name(n) for n in names):
            ending = "\r\n" if content.endswith("\r\n") else "\n" if content.endswith("\n") else ""
            parts[i] = head + sep + REDACTED + ending
        else:
            parts[i] = text(part)
    return delimiter.join(parts)


def _boundary(content_type: str, body: str) -> str | None:
    m = re.search(r'boundary="?([^";,\s]+)', content_type)
    if m:
        return m.group(1)
    first, _, _ = body[:200].partition("\n")
    first = first.rstrip("\r")
    if first.startswith("--") and len(first) > 2 and " " not in first:
        return first[2:]
    return None


def not_parsed(raw: str) -> str:
    """A body too deep to parse: its first EXCERPT characters, redacted, and a note."""
    excerpt = raw[:EXCERPT]
    return (
        text(excerpt) + f"\n… [not parsed: JSON nested deeper than {MAX_DEPTH} levels; "
        f"the first {len(excerpt)} of {len(raw)} characters are shown]"
    )


def body_text(body: bytes | None, content_type: str = "") -> str | None:
    """A body for display, secrets hidden: JSON pretty-printed, forms and text as written,
    binary summarised; JSON nested too deep is shown truncated with a note."""
    if body is None:
        return None
    if not body:
        return ""
    try:
        decoded = body.decode("utf-8")
    except UnicodeDecodeError:
        return f"<{len(body)} bytes of binary data>"
    try:
        value = _walk(_parse(decoded), 0, strict=True)  # strict: TooDeep past MAX_DEPTH
        shown = json.dumps(value, indent=2, ensure_ascii=False)
        if _SURROGATE.search(shown):  # "\ud800" parses to a str no page can encode
            shown = json.dumps(value, indent=2)
        return shown
    except TooDeep:
        return not_parsed(decoded)
    except ValueError:
        pass
    kind = content_type.lower()
    if "multipart/" in kind or decoded.startswith("--"):
        boundary = _boundary(content_type, decoded)
        if boundary:
            return _multipart(decoded, boundary)
    if "x-www-form-urlencoded" in kind or (
        "=" in decoded and _FORM_LIKE.fullmatch(decoded.strip())
    ):
        return query(decoded)
    return text(decoded)
