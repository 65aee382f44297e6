"""The requests rollback sends, built from a compensation record and checked before they go.

Credentials go only where the agent sent the step (`credentials_for`): a rule template naming
another host gets none. Each request names the session of its step: when it is sent, the
secrets that session may use for the request's host replace the agent's placeholders (see
undoproxy/broker/), so that only the hosts a `secrets:` entry names ever get its value.

A request that could not be sent as recorded (a header value with a line break, a URL with
userinfo or no host) is refused here with the reason, so that one bad step never stops a
rollback.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from undoproxy.bodyfiles import FileBody
from undoproxy.compensators.model import parse_json
from undoproxy.compensators.record import UNREADABLE_BODY, InverseRequest
from undoproxy.credentials import Credentials, credentials_for, with_query_credentials

# Query parameters that make a write conditional on one version of the resource; --force and
# every read aim at the resource itself (CouchDB `?rev=`, Elasticsearch `?if_seq_no=`).
PRECONDITION_PARAMS = frozenset(
    {"rev", "_rev", "if_match", "if-match", "if_seq_no", "if_primary_term"}
)
_TOKEN = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
_BAD_VALUE = re.compile(r"[\r\n\x00]")
# Retried after a 5xx or a lost connection: methods whose repeat leaves the same state. PATCH
# is not one (RFC 5789), nor POST: a lost answer is decided by a read, never by sending again.
IDEMPOTENT = frozenset({"GET", "HEAD", "PUT", "DELETE", "PROPFIND"})
UNREADABLE_CREDENTIALS = (
    "the agent's credentials for this step are encrypted with another credentials key (the "
    "journal was opened by an installation whose state dir key differs): nothing is sent "
    "without them; restore the original key (UNDOPROXY_CREDENTIALS_KEY or "
    "<state_dir>/credentials.key) or undo this step by hand"
)


class NotSendable(ValueError):
    """The recorded request cannot be sent as it is; the message says why."""


@dataclass
class Outgoing:
    """One request of rollback's, ready to send."""

    method: str
    url: str
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes | None = None
    session: str | None = None  # whose step it is: its secrets go in (upstream.py)
    body_file: FileBody | None = None  # a body too large for the journal: sent from its file

    @property
    def sent_body(self) -> bytes | FileBody | None:
        """What goes upstream as the body."""
        return self.body_file if self.body_file is not None else self.body

    @property
    def idempotent(self) -> bool:
        """Safe to repeat (retried on 5xx and connection errors)."""
        return self.method in IDEMPOTENT

    def json_body(self) -> Any:
        """The body as JSON, or None."""
        return parse_json(self.body)

    def with_json_body(self, value: Any) -> Outgoing:
        """The same request with another JSON body."""
        return Outgoing(
            self.method, self.url, dict(self.headers), json.dumps(value).encode(), self.session
        )


def resource_url(url: str) -> str:
    """The URL without the query parameters that pin one version of the resource."""
    parts = urlsplit(url)
    if not parts.query:
        return url
    pairs = parse_qsl(parts.query, keep_blank_values=True)
    kept = [(k, v) for k, v in pairs if k.lower() not in PRECONDITION_PARAMS]
    if len(kept) == len(pairs):
        return url
    return urlunsplit((parts.scheme, parts.netloc, parts.path, urlencode(kept), ""))


def check_url(url: str) -> None:
    """Raise NotSendable unless `url` is an absolute http(s) URL with a host and no userinfo."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError on a bad port
    except ValueError as exc:
        raise NotSendable(f"the URL is not valid ({exc})") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise NotSendable("the URL is not an absolute http(s) URL")
    if "@" in parts.netloc:
        raise NotSendable(
            "the URL carries credentials (user:password@); undoproxy does not send it"
        )
    if _BAD_VALUE.search(url) or " " in url:
        raise NotSendable("the URL contains a line break or a space")


def check_headers(headers: Mapping[str, str]) -> None:
    """Raise NotSendable when a header could not be sent as it is (CRLF injection included)."""
    for name, value in headers.items():
        if not _TOKEN.match(name):
            raise NotSendable(f"the header name {name!r} is not valid")
        if _BAD_VALUE.search(value):
            raise NotSendable(f"the header {name} contains a line break")


def _readable(credentials: Mapping[str, str]) -> None:
    if getattr(credentials, "unreadable", False):
        raise NotSendable(UNREADABLE_CREDENTIALS)


def _unredacted(url: str, step_url: str, credentials: Mapping[str, str]) -> str:
    """The URL as the agent sent it (the journal keeps secret query values redacted), with
    the agent's query-string credentials where the step's own origin needs them."""
    if not isinstance(credentials, Credentials):
        return url
    return with_query_credentials(credentials.unredact(url), step_url, credentials)


def read_request(
    url: str,
    step_url: str,
    credentials: dict[str, str],
    accept: str | None,
    *,
    session: str | None = None,
) -> Outgoing:
    """A GET of `url` with the agent's credentials where they belong (and, when sent, the
    secrets `session` may use for its host: the agent's placeholders replaced)."""
    _readable(credentials)
    url = _unredacted(url, step_url, credentials)
    check_url(url)
    headers = credentials_for(url, step_url, credentials)
    if accept:
        headers["Accept"] = accept
    check_headers(headers)
    return Outgoing("GET", url, headers, session=session)


def compensation_request(
    record: InverseRequest,
    step_url: str,
    credentials: dict[str, str],
    *,
    force: bool,
    session: str | None = None,
) -> Outgoing:
    """The inverse request a compensation record (or its fallback) describes; sent for
    `session` (a step sealed with a placeholder is undone with the real secret)."""
    _readable(credentials)
    method = record.method
    if not _TOKEN.match(method):
        raise NotSendable(f"the method {method!r} is not valid")
    url = record.url
    if not record.forward_credentials:
        url = _unredacted(url, step_url, credentials)
    elif isinstance(credentials, Credentials):
        url = credentials.unredact(url)
    if force:
        url = resource_url(url)
    check_url(url)
    headers = credentials_for(url, step_url, credentials, forward=record.forward_credentials)
    headers.update(record.headers)
    if record.body_unreadable:
        raise NotSendable(UNREADABLE_BODY)
    body = None
    if record.body_b64:
        try:
            body = base64.b64decode(record.body_b64, validate=True)
        except ValueError:
            raise NotSendable("the recorded body is not valid base64") from None
    if (body is not None or record.body_file is not None) and record.content_type:
        headers["Content-Type"] = record.content_type
    check_headers(headers)
    return Outgoing(method.upper(), url, headers, body, session, record.body_file)
