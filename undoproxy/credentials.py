"""Encryption at rest for the credentials a compensation must be sent with.

The key comes from `UNDOPROXY_CREDENTIALS_KEY` (a Fernet key), else from
`<state_dir>/credentials.key`, generated on first use with mode 0600. Sealed values are only
opened by the rollback executor, for that step's compensation; they never leave the process.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from cryptography.fernet import Fernet, InvalidToken
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from undoproxy import redact
from undoproxy.compensators.model import origin
from undoproxy.errors import UndoproxyError

KEY_ENV = "UNDOPROXY_CREDENTIALS_KEY"
KEY_FILE = "credentials.key"


def write_private(path: Path, data: bytes) -> None:
    """Create `path` with mode 0600 (never briefly world-readable)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


class CredentialBox:
    """Seals and opens header dicts (and, for the journal, replayable bodies) with one key."""

    def __init__(self, key: bytes) -> None:
        self._fernet = Fernet(key)
        self._key = key

    def fingerprint(self) -> str:
        """Names the key without revealing it: HMAC-SHA256 of a fixed text under the key."""
        return hmac.new(self._key, b"undoproxy credentials key", hashlib.sha256).hexdigest()

    _process: CredentialBox | None = None

    @classmethod
    def for_this_process(cls) -> CredentialBox:
        """A key that lives as long as this process: for a journal opened without one
        (tests, tools); what it seals is unreadable to any other process."""
        if cls._process is None:
            cls._process = cls(Fernet.generate_key())
        return cls._process

    def file_key(self) -> bytes:
        """The AES key body files are sealed with (undoproxy/bodyfiles.py): derived from this
        key, so that the state dir's one key opens them too, and nothing else does."""
        return HKDF(
            algorithm=hashes.SHA256(), length=16, salt=None, info=b"undoproxy body files"
        ).derive(self._key)

    def encrypt(self, data: bytes) -> bytes:
        """`data` encrypted and authenticated (a Fernet token, URL-safe base64 text)."""
        return self._fernet.encrypt(data)

    def decrypt(self, token: bytes) -> bytes:
        """What `encrypt` sealed; raises InvalidToken when the key differs or it was edited."""
        return self._fernet.decrypt(token)

    def derive(self, purpose: bytes) -> bytes:
        """A 32-byte key for `purpose`, derived from this one with HKDF-SHA256 (RFC 5869).

        One-way: the derived key reveals nothing of this one, and keys for different
        purposes are unrelated (the journal's chain key is `derive(chain.KEY_PURPOSE)`)."""
        raw = base64.urlsafe_b64decode(self._key)
        return HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=purpose).derive(raw)

    @classmethod
    def from_state_dir(cls, state_dir: Path) -> CredentialBox:
        """The box for this installation, creating its key file on first use."""
        found = cls.existing(state_dir)
        if found is not None:
            return found
        write_private(state_dir / KEY_FILE, Fernet.generate_key())
        return cls((state_dir / KEY_FILE).read_bytes().strip())

    @classmethod
    def existing(cls, state_dir: Path) -> CredentialBox | None:
        """The installation's box when it has a key (UNDOPROXY_CREDENTIALS_KEY, else
        `state_dir/credentials.key`), else None; never creates one (for read-only tools)."""
        env = os.environ.get(KEY_ENV)
        if env:
            return cls.from_key(env.encode(), KEY_ENV)
        path = state_dir / KEY_FILE
        if not path.exists():
            return None
        return cls.from_key(path.read_bytes().strip(), str(path))

    @classmethod
    def from_key(cls, key: bytes, where: str) -> CredentialBox:
        """A box for a Fernet key; UndoproxyError naming `where` when it is not one."""
        try:
            return cls(key)
        except ValueError:
            raise UndoproxyError(f"{where} is not a valid Fernet key") from None

    def seal(self, headers: dict[str, str], urls: Iterable[str] = ()) -> bytes | None:
        """Encrypted credential headers and the full form of every URL in `urls` that the
        journal keeps redacted; None when there is nothing to keep."""
        secrets = url_secrets(urls)
        if not headers and not secrets:
            return None
        payload = {"v": 2, "headers": headers, "urls": secrets}
        return self._fernet.encrypt(json.dumps(payload).encode())

    def open(self, sealed: bytes | None) -> Credentials:
        """What was sealed; empty when nothing was kept; `unreadable` when the key changed
        (never taken for "no credentials": a request sent without them could be answered by
        another account, or not at all)."""
        if not sealed:
            return Credentials()
        try:
            value = json.loads(self._fernet.decrypt(sealed))
        except InvalidToken:
            return Credentials(unreadable=True)
        if isinstance(value, dict) and value.get("v") == 2:
            return Credentials(value.get("headers") or {}, value.get("urls") or {})
        return Credentials(value)  # sealed by an older undoproxy: headers only


class Credentials(dict[str, str]):
    """The agent's credential headers of one step (a dict of them), and what the journal's
    redacted URLs of that step stand for (`unredact`)."""

    def __init__(
        self,
        headers: Mapping[str, str] | None = None,
        urls: Mapping[str, str] | None = None,
        *,
        unreadable: bool = False,
    ) -> None:
        super().__init__({str(k): str(v) for k, v in (headers or {}).items()})
        self.urls = {str(k): str(v) for k, v in (urls or {}).items()}
        # sealed with another credentials key: what the step was sent with is unknown
        self.unreadable = unreadable

    def unredact(self, url: str) -> str:
        """`url` with the secret query values the journal hid put back.

        An exact match first; else a URL of the same origin and path (the journal's URL with
        a version pin dropped, say) gets each hidden value back by parameter name.
        """
        if url in self.urls:
            return self.urls[url]
        if redact.REDACTED_IN_URL not in url:
            return url
        base, _, query = url.partition("?")
        for hidden, full in self.urls.items():
            if hidden.partition("?")[0] != base:
                continue
            values = dict(_pairs(full.partition("?")[2]))
            pieces = []
            for piece in query.split("&"):
                name, eq, value = piece.partition("=")
                if eq and value == redact.REDACTED_IN_URL and name in values:
                    piece = f"{name}={values[name]}"
                pieces.append(piece)
            return f"{base}?{'&'.join(pieces)}"
        return url


# Secret-named query parameters that belong to one URL, not to the agent: a signature, a
# one-time OAuth code. Every other secret-named parameter (api_key, access_token, key, ...)
# authenticates the agent and goes with it to the same origin, like its Authorization header.
_NOT_CREDENTIALS = frozenset({"sig", "signature", "code", "state", "nonce", "expires"})


def with_query_credentials(url: str, step_url: str, credentials: Credentials) -> str:
    """`url` with the agent's query-string credentials (`?api_key=`) of the step's own
    request added where missing, when `url` is on the step's origin; as is otherwise."""
    if "?" not in step_url or origin(url) != origin(step_url):
        return url
    full = credentials.unredact(step_url)
    wanted = [
        (name, value)
        for name, value in _pairs(full.partition("?")[2])
        if redact.is_secret_name(unquote(name))
        and unquote(name).lower() not in _NOT_CREDENTIALS
        and not unquote(name).lower().startswith(("x-amz-", "x-goog-"))
        and value != redact.REDACTED_IN_URL
    ]
    if not wanted:
        return url
    base, _, query = url.partition("?")
    present = {name for name, _ in _pairs(query)}
    extra = [f"{n}={v}" for n, v in wanted if n not in present]
    if not extra:
        return url
    return f"{base}?{'&'.join([query, *extra] if query else extra)}"


def _pairs(query: str) -> list[tuple[str, str]]:
    """Raw (still encoded) name=value pairs of a query string."""
    return [(n, v) for n, _, v in (p.partition("=") for p in query.split("&")) if n]


def urls_in(value: Any) -> set[str]:
    """Every absolute http(s) URL among the strings of a JSON-like value."""
    found: set[str] = set()
    stack = [value]
    while stack:  # iterative: called for every mutation, twice
        item = stack.pop()
        if isinstance(item, str):
            if item.startswith(("http://", "https://")):
                found.add(item)
        elif isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list | tuple):
            stack.extend(item)
    return found


def url_secrets(urls: Iterable[str]) -> dict[str, str]:
    """redacted URL -> full URL, for each URL that redaction changes."""
    out: dict[str, str] = {}
    for url in urls:
        hidden = redact.url(url)
        if hidden != url:
            out[hidden] = url
    return out


# Headers that make a request a signed one: the signature covers this request's method, path,
# date and body, so it can be neither replayed on a GET nor on a compensation.
_SIGNATURE_MARKS = (
    ("authorization", "AWS4-HMAC-SHA256", "AWS Signature Version 4"),
    ("authorization", "GOOG4-HMAC-SHA256", "Google Cloud Storage HMAC signature"),
    ("authorization", "AWS ", "AWS Signature Version 2"),
    ("x-amz-content-sha256", "", "AWS Signature Version 4"),
    ("x-goog-date", "", "Google Cloud Storage HMAC signature"),
    ("signature", "", "HTTP Message Signatures"),
)


def signature_scheme(headers: list[tuple[str, str]]) -> str | None:
    """The name of the request-signing scheme a request uses, or None when it is not signed."""
    for name, value in headers:
        low = name.lower()
        for mark, prefix, scheme in _SIGNATURE_MARKS:
            if low == mark and value.startswith(prefix):
                return scheme
    return None


def credentials_for(
    target_url: str, step_url: str, credentials: dict[str, str], *, forward: bool = False
) -> dict[str, str]:
    """The agent's credential headers to send to `target_url`: only to the scheme, host and
    port the agent itself sent the step to (`step_url`), unless a rule says
    `credentials: forward`. Snapshots, verification reads and compensations all ask here."""
    if not credentials:
        return {}
    if forward or origin(target_url) == origin(step_url):
        return dict(credentials)
    return {}
