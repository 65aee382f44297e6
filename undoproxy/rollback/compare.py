"""Is the target as it was? Comparisons of a read with a snapshot or an after-image (pure).

A read is one of: present (2xx, a representation), absent (404/410), unsupported (405/501: the
target has no representation to read) or unreadable (anything else: 401, 403, 5xx, a redirect,
no answer). Only present and absent are evidence; an unreadable target is never taken as gone,
changed or unchanged.

Bodies are compared as JSON when both are JSON (formatting and key order ignored; CouchDB's
`_rev`, which every write changes, ignored), else byte for byte. The representation headers a
snapshot kept (Content-Type, Content-Language, Cache-Control, x-amz-meta-*, ...) are compared
too. ETags are compared weakly: `W/"x"` and `"x"` are the same version.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from undoproxy.compensators.model import Snapshot, content_hash, parse_json, representation_headers
from undoproxy.upstream import UpstreamResponse

PRESENT, ABSENT, UNSUPPORTED, UNREADABLE = "present", "absent", "unsupported", "unreadable"
IGNORED_FIELDS = ("_rev",)


@dataclass
class Read:
    """One GET of a target: the answer, or why none came."""

    url: str
    response: UpstreamResponse | None
    error: str = ""

    @property
    def state(self) -> str:
        """present | absent | unsupported | unreadable."""
        if self.response is None:
            return UNREADABLE
        status = self.response.status
        if 200 <= status < 300:
            return PRESENT
        if status in (404, 410):
            return ABSENT
        if status in (405, 501):
            return UNSUPPORTED
        return UNREADABLE

    @property
    def why(self) -> str:
        """`GET answered HTTP 503`, or the connection error."""
        if self.response is None:
            return self.error or "no answer"
        return f"GET answered HTTP {self.response.status}"

    @property
    def etag(self) -> str | None:
        """The ETag of what was read."""
        return self.response.header("ETag") if self.response is not None else None


def normal_etag(value: str | None) -> str | None:
    """An ETag without its weakness marker, for weak comparison."""
    if value is None:
        return None
    value = value.strip()
    return value[2:] if value[:2].upper() == "W/" else value


def strong_etag(value: str | None) -> str | None:
    """The ETag when it is strong (If-Match only works with strong ones), else None."""
    if value is None or value.strip()[:2].upper() == "W/":
        return None
    return value.strip()


def _canonical(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: v for k, v in value.items() if k not in IGNORED_FIELDS}
    return value


def _field_changes(before: dict[str, Any], now: dict[str, Any]) -> str:
    def same(a: Any, b: Any) -> bool:
        return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)

    changed = sorted(k for k in before.keys() & now.keys() if not same(before[k], now[k]))
    added = sorted(now.keys() - before.keys())
    removed = sorted(before.keys() - now.keys())
    parts = []
    for label, names in (("changed", changed), ("added", added), ("missing", removed)):
        if names:
            shown = ", ".join(names[:5]) + (", ..." if len(names) > 5 else "")
            parts.append(f"{label}: {shown}")
    return "; ".join(parts)


def body_difference(before: bytes, now: bytes) -> str:
    """How a body differs from the snapshot's ('' when it does not). Names fields, never values."""
    old, new = parse_json(before), parse_json(now)
    if old is not None and new is not None:
        old, new = _canonical(old), _canonical(new)
        if content_hash(json.dumps(old).encode()) == content_hash(json.dumps(new).encode()):
            return ""
        if isinstance(old, dict) and isinstance(new, dict):
            return f"body fields differ ({_field_changes(old, new)})"
        return "the JSON body differs"
    if before == now:
        return ""
    return f"the body differs ({len(now)} bytes, was {len(before)} bytes)"


def _normal_value(name: str, value: str) -> str:
    value = value.strip()
    if name == "content-type":
        return value.lower().replace(" ", "")
    return value


def header_differences(snap: Snapshot, current: UpstreamResponse) -> list[str]:
    """The representation headers that differ from the snapshot's (names only)."""
    now = representation_headers(list(current.headers.items()))
    if snap.headers:
        expected = {k.lower(): v for k, v in snap.headers.items()}
        names = sorted(expected.keys() | now.keys())
    elif snap.content_type:  # a snapshot from before headers were kept: its type only
        expected = {"content-type": snap.content_type}
        names = sorted(expected)
    else:  # the snapshot's answer had no representation headers at all
        expected = {}
        names = sorted(now)
    out = []
    for name in names:
        was, is_ = expected.get(name), now.get(name)
        if was is None:
            out.append(f"header {name} was not there before")
        elif is_ is None:
            out.append(f"header {name} is missing")
        elif _normal_value(name, was) != _normal_value(name, is_):
            out.append(f"header {name} differs")
    return out


def differences(
    snap: Snapshot, current: UpstreamResponse, ignore: tuple[str, ...] = ()
) -> list[str]:
    """How a present or absent target differs from the snapshot ([] when it is as before)."""
    absent = current.status in (404, 410)
    if not snap.existed:
        return [] if absent else [f"it exists (GET answered {current.status}); it did not before"]
    if absent:
        return [f"it is gone (GET answered {current.status})"]
    before, now = snap.body, current.body
    if ignore:
        before, now = _without(before, ignore), _without(now, ignore)
    diff = body_difference(before, now)
    return ([diff] if diff else []) + header_differences(snap, current)


def _without(body: bytes, names: tuple[str, ...]) -> bytes:
    parsed = parse_json(body)
    if not isinstance(parsed, dict):
        return body
    return json.dumps({k: v for k, v in parsed.items() if k not in names}).encode()


def changed_since(current: UpstreamResponse, after: dict[str, Any]) -> str:
    """How the target differs from what the agent's write produced ('' when it does not)."""
    exists = 200 <= current.status < 300
    if after.get("exists") is False:
        return "" if not exists else "it exists again"
    if not exists:
        return f"it is gone (GET answered {current.status})"
    if after.get("etag"):
        now = current.header("ETag")
        if normal_etag(now) == normal_etag(after["etag"]):
            return ""
        if now is None and after.get("sha256"):
            pass  # the ETag is gone from the answers: fall back to the content
        else:
            return f"ETag {after['etag']} is now {now or 'absent'}"
    if after.get("sha256") and content_hash(current.body) != after["sha256"]:
        return "its content differs from what the agent wrote"
    return ""
