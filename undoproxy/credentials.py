"""Encryption at rest for the credentials a compensation must be sent with.

The key comes from `UNDOPROXY_CREDENTIALS_KEY` (a Fernet key), else from
`<state_dir>/credentials.key`, generated on first use with mode 0600. Sealed values are only
opened by the rollback executor, for that step's compensation; they never leave the process.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from cryptography.fernet import Fernet, InvalidToken

from undoproxy.compensators.model import origin
from undoproxy.errors import UndoproxyError

KEY_ENV = "UNDOPROXY_CREDENTIALS_KEY"


def write_private(path: Path, data: bytes) -> None:
    """Create `path` with mode 0600 (never briefly world-readable)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


class CredentialBox:
    """Seals and opens header dicts with one symmetric key."""

    def __init__(self, key: bytes) -> None:
        self._fernet = Fernet(key)

    @classmethod
    def from_state_dir(cls, state_dir: Path) -> CredentialBox:
        """The box for this installation, creating its key file on first use."""
        env = os.environ.get(KEY_ENV)
        if env:
            try:
                return cls(env.encode())
            except ValueError:
                raise UndoproxyError(f"{KEY_ENV} is not a valid Fernet key") from None
        path = state_dir / "credentials.key"
        if not path.exists():
            write_private(path, Fernet.generate_key())
        return cls(path.read_bytes().strip())

    def seal(self, headers: dict[str, str]) -> bytes | None:
        """Encrypted headers, or None when there is nothing to keep."""
        if not headers:
            return None
        return self._fernet.encrypt(json.dumps(headers).encode())

    def open(self, sealed: bytes | None) -> dict[str, str]:
        """The headers sealed earlier; an empty dict when none were kept or the key changed."""
        if not sealed:
            return {}
        try:
            value = json.loads(self._fernet.decrypt(sealed))
        except InvalidToken:
            return {}
        return {str(k): str(v) for k, v in value.items()}


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
    if forward or origin(target_url) == origin(step_url):
        return dict(credentials)
    return {}
