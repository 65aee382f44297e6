"""Plain data the compensators work on: what a step did, what it saw, what would undo it."""

from __future__ import annotations

import base64
import functools
import hashlib
import json
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from undoproxy.bodyfiles import FileBody


@functools.lru_cache(maxsize=1024)  # asked for each request undoproxy sends, often alike
def origin(url: str) -> tuple[str, str]:
    """(scheme, host:port) with default ports made explicit: where a request really goes."""
    parts = urlsplit(url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return parts.scheme, f"{(parts.hostname or '').lower()}:{port}"


def parse_json(body: bytes | None) -> Any:
    """The parsed JSON of a body, or None when it is empty or not JSON."""
    if not body:
        return None
    try:
        return json.loads(body)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return None


def parse_form(body: bytes | None) -> dict[str, str] | None:
    """The fields of an `application/x-www-form-urlencoded` body (last value wins), or None.

    Keys stay as sent (`metadata[plan]`); a body that is JSON or has no `=` is not a form.
    """
    if not body or parse_json(body) is not None:
        return None
    try:
        text = body.decode()
    except UnicodeDecodeError:
        return None
    if "=" not in text:
        return None
    try:
        return dict(parse_qsl(text, keep_blank_values=True, strict_parsing=True))
    except ValueError:
        return None


def content_hash(body: bytes | None) -> str:
    """A hash that ignores JSON formatting and key order; raw bytes otherwise."""
    parsed = parse_json(body)
    if parsed is not None:
        data = json.dumps(parsed, sort_keys=True, separators=(",", ":")).encode()
    else:
        data = body or b""
    return hashlib.sha256(data).hexdigest()


# What a tombstone may carry besides `deleted: true` (Stripe: id, object; Kinto: id,
# last_modified); anything more is a resource with a `deleted` flag, which is not absence.
TOMBSTONE_KEYS = frozenset({"id", "_id", "object", "uuid", "type", "last_modified", "_rev"})


def is_tombstone(body: bytes) -> bool:
    """True when a 2xx body says only that the resource is deleted (`{"deleted": true, ...}`,
    also inside Kinto's `{"data": ...}`)."""
    if not body or len(body) > 4096:
        return False
    doc = parse_json(body)
    if isinstance(doc, dict) and set(doc) == {"data"} and isinstance(doc["data"], dict):
        doc = doc["data"]
    return (
        isinstance(doc, dict)
        and doc.get("deleted") is True
        and set(doc) - {"deleted"} <= (TOMBSTONE_KEYS)
    )


AFTER_BODY_LIMIT = 64 * 1024  # an after-image keeps a JSON body up to this size (sealed)


@dataclass
class Snapshot:
    """The target of a mutation as a GET saw it just before the mutation was forwarded."""

    url: str
    status: int
    body: bytes = b""
    etag: str | None = None
    last_modified: str | None = None
    content_type: str | None = None
    # The headers that are part of the resource (Content-Language, Cache-Control,
    # x-amz-meta-*, ...): see `representation_headers`. A restore sends them back and a
    # verification read compares them.
    headers: dict[str, str] = field(default_factory=dict)
    # The API's own "no such thing" answer, when it is not a 404 (AWS JSON APIs answer 400
    # `ResourceNotFoundException`): a read declared so (`PreRead.absent_when`) and answered so.
    absent_answer: str = ""
    # A body too large for the journal, kept in a body file instead (`body` is then empty):
    # a restore streams it back, a verification compares by its SHA-256.
    file: FileBody | None = None

    @property
    def replay_body(self) -> bytes | FileBody:
        """What a request that writes this snapshot back sends: its bytes, or its file."""
        return self.file if self.file is not None else self.body

    @property
    def length(self) -> int:
        """The body's length in bytes."""
        return self.file.length if self.file is not None else len(self.body)

    @property
    def sha256(self) -> str:
        """The body's SHA-256."""
        if self.file is not None:
            return self.file.sha256
        return hashlib.sha256(self.body).hexdigest()

    @property
    def existed(self) -> bool:
        """False when the read said the target did not exist (404/410, a tombstone, or the
        API's declared "no such thing" answer)."""
        if self.absent_answer:
            return False
        if 200 <= self.status < 300 and is_tombstone(self.body):
            return False
        return self.status not in (404, 410)

    def to_json(self) -> dict[str, Any]:
        """The journal's form (bodies base64, exact bytes)."""
        return {
            "url": self.url,
            "status": self.status,
            "etag": self.etag,
            "last_modified": self.last_modified,
            "content_type": self.content_type,
            "headers": self.headers,
            "body_b64": base64.b64encode(self.body).decode(),
            "length": self.length,
            **({"absent_answer": self.absent_answer} if self.absent_answer else {}),
            **({"file": self.file.to_json()} if self.file is not None else {}),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Snapshot:
        """Back from the journal's form."""
        return cls(
            url=data["url"],
            status=data["status"],
            body=base64.b64decode(data.get("body_b64") or ""),
            etag=data.get("etag"),
            last_modified=data.get("last_modified"),
            content_type=data.get("content_type"),
            headers=dict(data.get("headers") or {}),
            absent_answer=str(data.get("absent_answer") or ""),
            file=FileBody.from_json(data.get("file")),
        )


# Headers that describe the representation itself rather than the exchange: a restore that
# drops them (x-amz-meta-*, Cache-Control) has not restored the resource.
REPRESENTATION_HEADERS = frozenset(
    {
        "content-type",
        "content-encoding",
        "content-language",
        "content-disposition",
        "cache-control",
        "expires",
    }
)
META_PREFIXES = ("x-amz-meta-", "x-goog-meta-", "x-object-meta-", "x-ms-meta-")


def representation_headers(
    items: list[tuple[str, str]], extra: frozenset[str] = frozenset()
) -> dict[str, str]:
    """The headers of a response that are part of the resource (names lower-cased)."""
    out: dict[str, str] = {}
    for name, value in items:
        low = name.lower()
        if low in REPRESENTATION_HEADERS or low in extra or low.startswith(META_PREFIXES):
            out[low] = value
    return out


def restore_headers(snap: Snapshot) -> dict[str, str]:
    """The snapshot's representation headers a restoring PUT sends back (Content-Encoding,
    x-amz-meta-*, ...). The body was kept as stored, content coding included (undoproxy reads
    with `Accept-Encoding: identity` and never decodes), so its Content-Encoding goes back
    with it; Content-Type travels as the body's type."""
    return {k: v for k, v in snap.headers.items() if k.lower() != "content-type"}


@dataclass
class Facts:
    """What is known about one mutation step; response fields are None before the response."""

    method: str
    url: str
    captures: dict[str, str] = field(default_factory=dict)
    request_body: bytes = b""
    snapshot: Snapshot | None = None
    response_status: int | None = None
    response_headers: dict[str, str] = field(default_factory=dict)
    response_body: bytes | None = None
    # Every snapshot taken before the step, by URL (`snapshot` is the first of them).
    snapshots: dict[str, Snapshot] = field(default_factory=dict)
    # The request's headers, names lower-cased, credentials left out (a MOVE's Destination).
    request_headers: dict[str, str] = field(default_factory=dict)
    # What the compensator's PreReads answered, by name (a PROPFIND of the properties, ...).
    reads: dict[str, Snapshot] = field(default_factory=dict)

    @property
    def request_json(self) -> Any:
        """The request body as JSON, or None."""
        return parse_json(self.request_body)

    @property
    def request_fields(self) -> Any:
        """The request body as JSON, else its form fields (Stripe, Slack), else None."""
        parsed = parse_json(self.request_body)
        return parsed if parsed is not None else parse_form(self.request_body)

    @property
    def response_json(self) -> Any:
        """The response body as JSON, or None."""
        return parse_json(self.response_body)

    def response_header(self, name: str) -> str | None:
        """A response header by case-insensitive name."""
        lower = name.lower()
        return next((v for k, v in self.response_headers.items() if k.lower() == lower), None)


MAX_READ_ROUNDS = 3  # rounds of PreReads before one step (each may depend on the one before)


@dataclass(frozen=True)
class PreRead:
    """A read a compensator needs before the step is forwarded, besides the snapshot GET (a
    PROPFIND of the properties, a GET of the destination a MOVE overwrites). The snapshot addon
    sends it with the agent's credentials and puts the answer in `Facts.reads[name]`; one that
    fails (no answer, or not 2xx/404/410) blocks the step, unless it is `optional`: then it is
    left out of `Facts.reads` and the compensator decides. A pack that needs one read's answer
    to know the next (DynamoDB: the table's key schema, then the item) is asked again with
    the answers so far (`packs.reads_for`), up to MAX_READ_ROUNDS times."""

    name: str
    method: str
    url: str
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    optional: bool = False
    # The API's "no such thing" when it is not a 404 (readback.absent_when): such an answer is
    # the read's result (the target did not exist), not a failed read.
    absent_when: dict[str, Any] | None = None


@dataclass
class Plan:
    """Decided before forwarding: which compensation applies, and what to snapshot for it."""

    kind: str  # restore | delete-created | recreate | template | rpc | a pack name | irreversible
    snapshot_url: str | None = None
    template: dict[str, Any] | None = None
    reason: str | None = None  # why it is irreversible
    inferred: bool = False  # chosen by defaults.compensate: auto, not by a rule
    # More URLs to GET before forwarding, besides snapshot_url (a pack's: an S3 object's
    # tags, every key of a DeleteObjects); the builder finds them in Facts.snapshots.
    more_snapshots: tuple[str, ...] = ()
    # The email pack's correction, {provider, subject, text} (see compensators/email.py),
    # and why it cannot be sent when that is known before forwarding (a signed request).
    correction: dict[str, str] | None = None
    correction_blocked: str | None = None

    @property
    def irreversible(self) -> bool:
        """True when no compensation exists for this step."""
        return self.kind == "irreversible"


def encode_body(value: Any) -> tuple[str | None, str | None]:
    """(base64 body, content type) for a compensation body given as JSON, text or bytes."""
    if value is None:
        return None, None
    if isinstance(value, bytes):
        return base64.b64encode(value).decode(), None
    if isinstance(value, str):
        return base64.b64encode(value.encode()).decode(), "text/plain; charset=utf-8"
    return base64.b64encode(json.dumps(value).encode()).decode(), "application/json"


class Irreversible(Exception):
    """No compensation can be built; the message says why (and what a person should do)."""


class NothingToUndo(Exception):
    """The step changed nothing upstream; `kind` says what shows it (`record.NOTHING_EVIDENCE`:
    `read` a read before it, `request` the request itself, `answer` the API's answer)."""

    def __init__(self, message: str, kind: str) -> None:
        super().__init__(message)
        self.kind = kind


def inverse_request(
    method: str,
    url: str,
    body: Any = None,
    content_type: str | None = None,
    headers: dict[str, str] | None = None,
) -> dict[str, Any]:
    """One inverse request in the journal's form (a FileBody `body` is sent from its file)."""
    if isinstance(body, FileBody):
        body_b64, inferred_type = None, None
    else:
        body_b64, inferred_type = encode_body(body)
    out: dict[str, Any] = {
        "method": method,
        "url": url,
        "body_b64": body_b64,
        "content_type": content_type or inferred_type,
    }
    if isinstance(body, FileBody):
        out["body_file"] = body.to_json()
    if headers:
        out["headers"] = headers
    return out
