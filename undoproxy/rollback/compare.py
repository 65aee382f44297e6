"""Is the target as it was? Comparisons of a read with a snapshot or an after-image (pure).

A read is one of: present (2xx, a representation), absent (404/410, or a tombstone: a 2xx whose
JSON says only that the thing is `deleted`, as Stripe and Kinto answer), unsupported (405/501:
the target has no representation to read) or unreadable (anything else: 401, 403, 5xx, a
redirect, no answer). Only present and absent are evidence; an unreadable target is never taken
as gone, changed or unchanged.

Bodies are compared as the upstream stores them: as JSON when both are JSON and neither is
content-coded (formatting and key order ignored; CouchDB's `_rev`, which every write changes,
ignored), field by field down nested objects (`data.last_modified`); else byte for byte, or by
SHA-256 when a body was too large to keep (a read's, or a snapshot kept in a body file). The
representation headers a snapshot kept (Content-Type, Content-Encoding, Content-Language,
Cache-Control, x-amz-meta-*, ...) are compared too. ETags are compared weakly: `W/"x"` and
`"x"` are the same version.

Fields the server sets on every write (`updated_at`, `last_modified`, revision counters) differ
after any restore; `server_set` tells them apart by evidence (see its docstring), so that a
restored resource is never called failed for what no client can set.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from undoproxy.compensators.model import (
    Snapshot,
    content_hash,
    is_tombstone,
    parse_json,
    representation_headers,
)
from undoproxy.upstream import UpstreamResponse

PRESENT, ABSENT, UNSUPPORTED, UNREADABLE = "present", "absent", "unsupported", "unreadable"
IGNORED_FIELDS = ("_rev",)
_SHOWN = 5  # field names listed in a difference before "..."

FieldPath = tuple[str | int, ...]


@dataclass
class Read:
    """One read of a target (a GET, or an RPC read such as a POST with a body): the answer,
    or why none came. `absent_answer` names the API's documented answer for "no such thing"
    when it is not a 404 (AWS JSON APIs: HTTP 400 `ResourceNotFoundException`), as a pack's
    read-back declares it (`compensators/readback.absent_answer`)."""

    url: str
    response: UpstreamResponse | None
    error: str = ""
    method: str = "GET"
    absent_answer: str = ""

    @property
    def state(self) -> str:
        """present | absent | unsupported | unreadable."""
        if self.response is None:
            return UNREADABLE
        if self.absent_answer:
            return ABSENT
        status = self.response.status
        if 200 <= status < 300:
            return ABSENT if is_tombstone(self.response.body) else PRESENT
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
        said = f"{self.method} answered HTTP {self.response.status}"
        if self.absent_answer:
            return f"{said} ({self.absent_answer})"
        if self.state == ABSENT and 200 <= self.response.status < 300:
            return f"{said} with a tombstone"
        return said

    @property
    def etag(self) -> str | None:
        """The ETag of what was read."""
        return self.response.header("ETag") if self.response is not None else None


def _gone(response: UpstreamResponse) -> str:
    if 200 <= response.status < 300:
        return f"GET answered {response.status} with a tombstone"
    return f"GET answered {response.status}"


def absent(response: UpstreamResponse) -> bool:
    """True when an answer shows the target absent (404, 410, or a tombstone)."""
    return Read("", response).state == ABSENT


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


# --- JSON, field by field ------------------------------------------------------------------


@dataclass(frozen=True)
class FieldDiff:
    """One field that differs: changed (both have it), added (only now) or missing."""

    path: FieldPath
    kind: str  # changed | added | missing
    now: Any = field(default=None, compare=False, hash=False)  # its value now (never shown)

    @property
    def name(self) -> str:
        """`data.last_modified`, `items[0].id`: how a report names it (never its value)."""
        out = ""
        for key in self.path:
            out += f"[{key}]" if isinstance(key, int) else (f".{key}" if out else str(key))
        return out or "the document"


def _same(a: Any, b: Any) -> bool:
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def json_diff(before: Any, now: Any, path: FieldPath = ()) -> list[FieldDiff]:
    """Where two JSON values differ, down objects and equally long lists ([] when equal)."""
    if isinstance(before, dict) and isinstance(now, dict):
        out: list[FieldDiff] = []
        for key in sorted(before.keys() | now.keys()):
            if path == () and key in IGNORED_FIELDS:
                continue
            if key not in now:
                out.append(FieldDiff((*path, key), "missing"))
            elif key not in before:
                out.append(FieldDiff((*path, key), "added", now[key]))
            else:
                out.extend(json_diff(before[key], now[key], (*path, key)))
        return out
    if isinstance(before, list) and isinstance(now, list) and len(before) == len(now):
        pairs = enumerate(zip(before, now, strict=True))
        return [d for i, (a, b) in pairs for d in json_diff(a, b, (*path, i))]
    return [] if _same(before, now) else [FieldDiff(path, "changed", now)]


def value_at(doc: Any, path: FieldPath) -> tuple[bool, Any]:
    """(found, value) at `path` in a JSON document."""
    for key in path:
        if isinstance(key, int):
            if not isinstance(doc, list) or not -len(doc) <= key < len(doc):
                return False, None
        elif not isinstance(doc, dict) or key not in doc:
            return False, None
        doc = doc[key]
    return True, doc


def describe_fields(diffs: Sequence[FieldDiff]) -> str:
    """`changed: a, data.b; added: c` (names only, never values)."""
    parts = []
    for kind in ("changed", "added", "missing"):
        names = [d.name for d in diffs if d.kind == kind]
        if names:
            shown = ", ".join(names[:_SHOWN]) + (", ..." if len(names) > _SHOWN else "")
            parts.append(f"{kind}: {shown}")
    return "; ".join(parts)


def server_set(
    diffs: Sequence[FieldDiff], sent: Any, agent_left: Iterable[Any] | None
) -> tuple[list[FieldDiff], list[FieldDiff]]:
    """Split field differences after a restore into (set by the server, not restored).

    A field counts as set by the server only on evidence: the undo sent it (`sent`, the body
    of the compensation, 2xx-accepted), the server now shows a third value for it (neither what
    was sent, since it differs from the snapshot the undo wrote, nor what the agent's step left:
    `agent_left` holds the agent's request and response documents, and the after-image when
    one was read). A field that went missing or appeared, or that still holds the agent's
    value, was not restored. `agent_left` None means the agent's step wrote something undoproxy
    cannot read field by field (not JSON): then no field can be told apart.
    """
    if agent_left is None:
        return [], list(diffs)
    left = list(agent_left)
    by_server, not_restored = [], []
    for diff in diffs:
        found, sent_value = value_at(sent, diff.path)
        if diff.kind != "changed" or not found:
            not_restored.append(diff)
            continue
        if _blank(diff.now) and not _blank(sent_value):
            # A server that sets a field on every write does not blank it: a value the undo
            # sent that now reads empty is one the server did not take (it did not read the
            # undo's body as the agent's write was read: a form, say), not one it set.
            not_restored.append(diff)
            continue
        agents = [value_at(doc, diff.path) for doc in left]
        if any(found and _same(value, diff.now) for found, value in agents):
            not_restored.append(diff)  # still as the agent's step left it
        else:
            by_server.append(diff)
    return by_server, not_restored


def _blank(value: Any) -> bool:
    return value is None or value == "" or value == [] or value == {}


# --- a read against a snapshot -------------------------------------------------------------


def _coded(headers: dict[str, str] | None) -> bool:
    coding = (headers or {}).get("content-encoding", "identity").strip().lower()
    return coding not in ("", "identity")


@dataclass
class Comparison:
    """How a present or absent target differs from the snapshot: JSON fields, and the rest
    (existence, bytes, headers). Empty when it is as before."""

    fields: list[FieldDiff]
    other: list[str]
    before: Any = None  # the snapshot's JSON, when fields were compared
    now: Any = None  # the read's JSON, likewise

    def __bool__(self) -> bool:
        return bool(self.fields or self.other)

    def describe(self, fields: Sequence[FieldDiff] | None = None) -> list[str]:
        """The differences as a report lists them (names, never values)."""
        chosen = self.fields if fields is None else fields
        named = [f"body fields differ ({describe_fields(chosen)})"] if chosen else []
        return named + self.other


def compare(snap: Snapshot, current: UpstreamResponse, ignore: tuple[str, ...] = ()) -> Comparison:
    """Compare a read with the snapshot (see the module docstring for how)."""
    gone = absent(current)
    if not snap.existed:
        other = [] if gone else [f"it exists (GET answered {current.status}); it did not before"]
        return Comparison([], other)
    if gone:
        return Comparison([], [f"it is gone ({_gone(current)})"])
    headers = representation_headers(list(current.headers.items()))
    if snap.file is not None:  # too large for the journal: known by its length and hash
        same = current.sha256 == snap.file.sha256 and current.length == snap.file.length
        differ = f"the body differs ({current.length} bytes, was {snap.file.length} bytes)"
        body = Comparison([], [] if same else [differ])
    else:
        body = body_comparison(snap.body, snap.headers, current, headers, ignore)
    body.other += header_differences(snap, headers)
    return body


def body_comparison(
    before: bytes,
    before_headers: dict[str, str] | None,
    current: UpstreamResponse,
    now_headers: dict[str, str] | None = None,
    ignore: tuple[str, ...] = (),
) -> Comparison:
    """The body of a read against `before`: fields when both are plain JSON, else bytes."""
    if now_headers is None:
        now_headers = representation_headers(list(current.headers.items()))
    differ = f"the body differs ({current.length} bytes, was {len(before)} bytes)"
    if not current.complete:  # too large to keep: known by its hash
        return Comparison(
            [], [] if hashlib.sha256(before).hexdigest() == current.sha256 else [differ]
        )
    coded = _coded(before_headers) or _coded(now_headers)
    old = None if coded else parse_json(before)
    new = None if coded else parse_json(current.body)
    if old is not None and new is not None:
        if ignore and isinstance(old, dict) and isinstance(new, dict):
            old = {k: v for k, v in old.items() if k not in ignore}
            new = {k: v for k, v in new.items() if k not in ignore}
        diffs = json_diff(old, new)
        if isinstance(old, dict) and isinstance(new, dict):
            return Comparison(diffs, [], old, new)
        return Comparison([], ["the JSON body differs"] if diffs else [], old, new)
    return Comparison([], [] if before == current.body else [differ])


def _normal_value(name: str, value: str) -> str:
    value = value.strip()
    if name == "content-type":
        return value.lower().replace(" ", "")
    return value


def header_differences(snap: Snapshot, now: dict[str, str]) -> list[str]:
    """The representation headers that differ from the snapshot's (names only)."""
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
    return compare(snap, current, ignore).describe()


def body_difference(before: bytes, now: bytes) -> str:
    """How a body differs from the snapshot's ('' when it does not). Names fields, never values."""
    found = body_comparison(before, None, UpstreamResponse(200, {}, now))
    return "; ".join(found.describe())


def changed_since(current: UpstreamResponse, after: dict[str, Any]) -> str:
    """How the target differs from what the agent's write produced ('' when it does not)."""
    exists = not absent(current)
    if after.get("exists") is False:
        return "" if not exists else "it exists again"
    if not exists:
        return f"it is gone ({_gone(current)})"
    if after.get("etag"):
        now = current.header("ETag")
        if normal_etag(now) == normal_etag(after["etag"]):
            return ""
        if now is None and after.get("sha256"):
            pass  # the ETag is gone from the answers: fall back to the content
        else:
            return f"ETag {after['etag']} is now {now or 'absent'}"
    if after.get("sha256") and not _same_content(current, after["sha256"]):
        return "its content differs from what the agent wrote"
    return ""


def _same_content(current: UpstreamResponse, sha256: str) -> bool:
    if current.complete:
        return content_hash(current.body) == sha256 or current.sha256 == sha256
    return current.sha256 == sha256


# --- drift: the target against what the agent's write left ----------------------------------


def after_body(after: dict[str, Any]) -> Any:
    """The JSON an after-image kept (None when it kept none)."""
    try:
        raw = base64.b64decode(after.get("body_b64") or "", validate=True)
    except (binascii.Error, ValueError):
        return None
    return parse_json(raw)


def json_fields_changed(left: Any, current: UpstreamResponse) -> list[FieldDiff] | None:
    """The fields of a read that differ from `left` (JSON objects both); None when either is
    not one, or the read is content-coded or incomplete."""
    if not isinstance(left, dict) or not current.complete:
        return None
    if _coded(representation_headers(list(current.headers.items()))):
        return None
    now = parse_json(current.body)
    return json_diff(left, now) if isinstance(now, dict) else None


def json_fields_changed_between(a: Read, b: Read) -> list[FieldDiff]:
    """Fields that differ between two reads of one target made a moment apart: values the
    server computes per read (a counter, a signed link), never a change by a client."""
    if a.response is None or b.response is None:
        return []
    first = parse_json(a.response.body)
    if not isinstance(first, dict):
        return []
    return json_fields_changed(first, b.response) or []
